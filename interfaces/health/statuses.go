package health

import (
	"context"
	"fmt"
	"sync"

	"github.com/chanos/chanos/chanos"
)

// NameOf returns the name under which the domain that exports name
// exports its health service: name + ".health", so that a probe finds
// one from the other (`chanos health NAME`).
func NameOf(name string) string { return name + ".health" }

// MaxWatched bounds the services one connection may watch: a watch past
// it ends the connection as the client's protocol violation, so that a
// client can make the server hold no set of any size.
const MaxWatched = 64

// Statuses holds the serving status of a domain's services and serves
// them over health: check answers with a service's status, and watch
// sends changed messages. The empty service, "", is the domain as a
// whole: serving from NewStatuses on. Use it with Serve:
//
//	st := health.NewStatuses()
//	l, err := health.Export(ctx, d, health.NameOf("kv"))
//	...
//	go health.Serve(ctx, l, st)
//	st.Set("kv", health.ServingStatusServing)
//
// A watcher that reads slowly holds up nobody: each of its connections
// has a goroutine that sends the latest status of each service it
// watches, as statuses change, and a service that changes twice before
// the first change is sent is sent once, as it is then.
type Statuses struct {
	UnimplementedServer

	mu       sync.Mutex
	status   map[string]ServingStatus
	shutdown bool
	watchers map[*Client]*watcher
}

// watcher is what one connection watches, and what it has yet to be
// sent; its goroutine sends.
type watcher struct {
	services map[string]bool
	dirty    map[string]bool
	wake     chan struct{} // one pending wake-up
}

// NewStatuses returns statuses with the domain as a whole ("") serving
// and no service known.
func NewStatuses() *Statuses {
	return &Statuses{status: map[string]ServingStatus{"": ServingStatusServing}, watchers: map[*Client]*watcher{}}
}

// Set sets the status of service, and tells the connections that watch
// it. After Shutdown, Set does nothing until Resume.
func (s *Statuses) Set(service string, status ServingStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return
	}
	s.setLocked(service, status)
}

func (s *Statuses) setLocked(service string, status ServingStatus) {
	if old, ok := s.status[service]; ok && old == status {
		return
	}
	s.status[service] = status
	for _, w := range s.watchers {
		if w.services[service] {
			w.dirty[service] = true
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// Shutdown sets every service, the domain's "" included, not serving,
// and ignores Set until Resume: for a domain that drains before it
// stops, so that probes and balancers turn away first.
func (s *Statuses) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = true
	for service := range s.status {
		s.setLocked(service, ServingStatusNotServing)
	}
}

// Resume sets every service serving again and lets Set work.
func (s *Statuses) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = false
	for service := range s.status {
		s.setLocked(service, ServingStatusServing)
	}
}

// Status returns service's status, and false if none was ever set.
func (s *Statuses) Status(service string) (ServingStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.status[service]
	return st, ok
}

// Check implements Server: the status of service, or an error of
// CodeNotFound for a service with none, as gRPC's health check answers.
func (s *Statuses) Check(ctx context.Context, service string) (ServingStatus, error) {
	if st, ok := s.Status(service); ok {
		return st, nil
	}
	return 0, chanos.Errorf(chanos.CodeNotFound, "no status for service %q", service)
}

// Watch implements Server: from is sent service's status now, as
// service_unknown if it has none, and again at each change, until its
// connection ends.
func (s *Statuses) Watch(ctx context.Context, from *Client, m Watch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watchers[from]
	if w == nil {
		w = &watcher{services: map[string]bool{}, dirty: map[string]bool{}, wake: make(chan struct{}, 1)}
		s.watchers[from] = w
		go s.send(from, w)
	}
	if !w.services[m.Service] && len(w.services) == MaxWatched {
		return from.c.Violation(fmt.Errorf("health: a connection watches at most %d services", MaxWatched))
	}
	w.services[m.Service] = true
	w.dirty[m.Service] = true
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

// send sends w's changes to from until from's connection ends.
func (s *Statuses) send(from *Client, w *watcher) {
	ctx := from.c.Context()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, from)
		s.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		s.mu.Lock()
		changes := make([]Changed, 0, len(w.dirty))
		for service := range w.dirty {
			st, ok := s.status[service]
			if !ok {
				st = ServingStatusServiceUnknown
			}
			changes = append(changes, Changed{Service: service, Status: st})
		}
		clear(w.dirty)
		s.mu.Unlock()
		for i := range changes {
			if err := from.Send(ctx, &changes[i]); err != nil {
				return
			}
		}
	}
}

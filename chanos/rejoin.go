package chanos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// MonitorEvent is a change in a domain's session with its monitor, as
// OnMonitor reports it.
type MonitorEvent struct {
	// Lost is set when the session ended (the monitor exited or was
	// killed); otherwise the domain has joined a new monitor in its
	// directory again and exported its names there.
	Lost bool
	// Err is why the session ended (Lost; it matches ErrMonitorLost), or,
	// after a rejoin, the names that could not be exported again (their
	// listeners stop with that error), nil if none.
	Err error
	// Domain is the domain's id: its new one after a rejoin.
	Domain uint64
}

// WithoutRejoin makes the domain end when its session with the monitor
// ends: Done is closed at once, Err matches ErrMonitorLost, and the
// listeners stop. By default a domain whose monitor goes away waits for a
// new one in the same directory, joins it and exports its names again.
func WithoutRejoin() Option { return func(o *options) { o.noRejoin = true } }

// OnMonitor has fn called, in a goroutine of the domain's, one call at a
// time, when the session with the monitor ends and when the domain has
// rejoined a new monitor. fn should return soon: the rejoin waits for it.
func OnMonitor(fn func(MonitorEvent)) Option { return func(o *options) { o.onMonitor = fn } }

// Waits between a domain's attempts to join a new monitor: the first, and
// the longest as the wait doubles. A restarted monitor is found within
// rejoinMaxWait of its socket appearing.
const (
	rejoinFirstWait = 10 * time.Millisecond
	rejoinMaxWait   = 250 * time.Millisecond
)

// run follows the domain's sessions with the monitor, from the first
// (conn, whose serving's end end receives) until the domain ends.
func (d *Domain) run(conn *Conn, end chan error) {
	defer close(d.done)
	for {
		err := d.sessionEnd(<-end)
		conn.Close()
		d.mu.Lock()
		closing := d.closing
		d.mu.Unlock()
		if closing || d.noRejoin {
			d.endSession(err)
			return
		}
		d.log.Warn("chanos: lost the monitor; waiting for a new one to rejoin", "dir", d.dir, "err", err)
		d.event(MonitorEvent{Lost: true, Err: err, Domain: d.ID()})
		if conn, end = d.rejoin(); conn == nil {
			d.endSession(ErrClosed)
			return
		}
	}
}

// event calls the OnMonitor function, if any.
func (d *Domain) event(ev MonitorEvent) {
	if d.onMonitor != nil {
		d.onMonitor(ev)
	}
}

// rejoin joins a monitor in d's directory once one runs there, makes it
// the domain's session and exports the domain's names again. It returns
// nil if the domain is closed first.
func (d *Domain) rejoin() (*Conn, chan error) {
	wait := rejoinFirstWait
	warned := false
	for {
		select {
		case <-d.quit:
			return nil, nil
		case <-time.After(wait):
		}
		wait = min(2*wait, rejoinMaxWait)
		timeout := d.timeout
		if timeout <= 0 {
			timeout = DefaultCallTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		conn, end, err := d.open(ctx)
		cancel()
		if err != nil {
			switch {
			case errors.Is(err, ErrUntrustedMonitor) && !warned:
				warned = true
				d.log.Warn("chanos: not rejoining an untrusted monitor; trying again", "dir", d.dir, "err", err)
			case !errors.Is(err, ErrNoMonitor):
				d.log.Debug("chanos: rejoin failed; trying again", "dir", d.dir, "err", err)
			}
			continue
		}
		// The session and the names to export on it change together: an
		// Export made on the new session from now on is not made twice.
		d.mu.Lock()
		if d.closing {
			d.mu.Unlock()
			conn.Close()
			<-end
			return nil, nil
		}
		d.conn = conn
		listeners := make([]*Listener, 0, len(d.exports))
		var relays []*Listener
		for _, l := range d.exports {
			if l.relay != nil || strings.HasPrefix(l.name, "#") {
				// An export without a name (an endpoint's for another
				// machine, one adopted without a name) was reachable by
				// its iref only, which dies with the monitor that made it.
				relays = append(relays, l)
				continue
			}
			listeners = append(listeners, l)
		}
		clear(d.exports)
		for _, list := range d.early {
			for _, in := range list {
				wire.CloseCaps(in.Fds)
			}
		}
		clear(d.early)
		d.mu.Unlock()
		for _, l := range relays {
			l.stop(ErrMonitorLost)
		}
		err = d.reexport(conn, listeners)
		d.log.Info("chanos: rejoined the monitor", "dir", d.dir, "domain", d.ID(), "exports", len(listeners))
		d.mu.Lock()
		close(d.rejoined)
		d.rejoined = make(chan struct{})
		d.mu.Unlock()
		d.event(MonitorEvent{Err: err, Domain: d.ID()})
		return conn, end
	}
}

// reexport exports the names of listeners again on the session conn.
// A listener whose name cannot be exported stops with the reason, which
// reexport returns, joined with the others'.
func (d *Domain) reexport(conn *Conn, listeners []*Listener) error {
	var errs []error
	for _, l := range listeners {
		err := d.exportOn(conn, l)
		if err != nil {
			err = fmt.Errorf("chanos: export %q again after the monitor's restart: %w", l.name, err)
			d.log.Warn("chanos: could not export a name again", "name", l.name, "err", err)
			l.stop(err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// exportOn exports l's name on the session conn and gives l the new ref.
func (d *Domain) exportOn(conn *Conn, l *Listener) error {
	call, err := exportCall(l.name, l.iface, l.opts)
	if err != nil {
		return err
	}
	var reply monitor.ExportReply
	if err := d.callOn(conn, context.Background(), call, &reply); err != nil {
		return err
	}
	l.mu.Lock()
	stopped := l.err != nil
	l.ref = reply.Ref
	l.mu.Unlock()
	d.mu.Lock()
	if stopped || d.closing {
		d.mu.Unlock()
		// Closed meanwhile: the name goes with the listener (or the session).
		var wr monitor.WithdrawReply
		d.callOn(conn, context.Background(), &monitor.WithdrawCall{Name: l.name}, &wr)
		return nil
	}
	d.adoptUnlock(l, reply.Ref.Export)
	return nil
}

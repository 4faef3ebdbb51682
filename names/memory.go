package names

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/chanos/chanos/wire"
)

// watchBuffer is how many events a watcher may fall behind before it is
// dropped with ErrWatchOverflow: buffers are bounded, so one slow watcher
// can neither stall the store nor make it grow without limit.
const watchBuffer = 1024

// Memory is an in-memory Store, the one a single machine's monitor uses.
// The zero value is not usable; call NewMemory.
type Memory struct {
	mu       sync.Mutex
	entries  map[string]entry
	sorted   []string // the keys of entries, sorted, for List
	classes  map[string]uint64
	waiters  map[string][]chan wire.Iref
	watchers map[*Watcher]string // watcher -> prefix
	closed   bool
}

type entry struct {
	ref   wire.Iref
	owner Owner
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{
		entries:  map[string]entry{},
		classes:  map[string]uint64{},
		waiters:  map[string][]chan wire.Iref{},
		watchers: map[*Watcher]string{},
	}
}

// Set implements Store.
func (m *Memory) Set(ctx context.Context, name string, ref wire.Iref, owner Owner) error {
	if err := ValidName(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if _, ok := m.entries[name]; ok {
		return fmt.Errorf("set %q: %w", name, ErrExists)
	}
	m.entries[name] = entry{ref: ref, owner: owner}
	i, _ := slices.BinarySearch(m.sorted, name)
	m.sorted = slices.Insert(m.sorted, i, name)
	m.classes[Class(name)]++
	for _, w := range m.waiters[name] {
		w <- ref // buffered with room for exactly this value
	}
	delete(m.waiters, name)
	m.notify(Event{Name: name, Ref: ref})
	return nil
}

// Get implements Store.
func (m *Memory) Get(ctx context.Context, name string) (wire.Iref, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return wire.Iref{}, ErrClosed
	}
	e, ok := m.entries[name]
	if !ok {
		return wire.Iref{}, fmt.Errorf("get %q: %w", name, ErrNotFound)
	}
	return e.ref, nil
}

// WaitFor implements Store.
func (m *Memory) WaitFor(ctx context.Context, name string) (wire.Iref, error) {
	if err := ValidName(name); err != nil {
		return wire.Iref{}, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return wire.Iref{}, ErrClosed
	}
	if e, ok := m.entries[name]; ok {
		m.mu.Unlock()
		return e.ref, nil
	}
	ch := make(chan wire.Iref, 1)
	m.waiters[name] = append(m.waiters[name], ch)
	m.mu.Unlock()

	select {
	case ref, ok := <-ch:
		if !ok {
			return wire.Iref{}, ErrClosed
		}
		return ref, nil
	case <-ctx.Done():
		m.mu.Lock()
		defer m.mu.Unlock()
		// Set may have fired between ctx ending and taking the lock.
		select {
		case ref, ok := <-ch:
			if ok {
				return ref, nil
			}
		default:
		}
		ws := m.waiters[name]
		if i := slices.Index(ws, ch); i >= 0 {
			ws = slices.Delete(ws, i, i+1)
		}
		if len(ws) == 0 {
			delete(m.waiters, name)
		} else {
			m.waiters[name] = ws
		}
		return wire.Iref{}, fmt.Errorf("wait for %q: %w", name, ctx.Err())
	}
}

// Count implements Store.
func (m *Memory) Count(ctx context.Context, class string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	return m.classes[class], nil
}

// Remove implements Store.
func (m *Memory) Remove(ctx context.Context, name string, owner Owner) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	e, ok := m.entries[name]
	if !ok {
		return fmt.Errorf("remove %q: %w", name, ErrNotFound)
	}
	if e.owner != owner {
		return fmt.Errorf("remove %q: %w", name, ErrNotOwner)
	}
	m.removeLocked(name, e)
	return nil
}

// Transfer implements Store.
func (m *Memory) Transfer(ctx context.Context, name string, from, to Owner) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	e, ok := m.entries[name]
	switch {
	case !ok:
		return fmt.Errorf("transfer %q: %w", name, ErrNotFound)
	case e.owner != from:
		return fmt.Errorf("transfer %q: %w", name, ErrNotOwner)
	}
	e.owner = to
	m.entries[name] = e
	return nil
}

func (m *Memory) removeLocked(name string, e entry) {
	delete(m.entries, name)
	if i, ok := slices.BinarySearch(m.sorted, name); ok {
		m.sorted = slices.Delete(m.sorted, i, i+1)
	}
	class := Class(name)
	if m.classes[class]--; m.classes[class] == 0 {
		delete(m.classes, class)
	}
	m.notify(Event{Name: name, Ref: e.ref, Removed: true})
}

// List implements Store.
func (m *Memory) List(ctx context.Context, prefix, after string, limit int) ([]string, bool, error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("list: limit %d must be positive", limit)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, false, ErrClosed
	}
	start := prefix
	if after > start {
		start = after
	}
	i, found := slices.BinarySearch(m.sorted, start)
	if found && start == after {
		i++ // after itself was on the previous page
	}
	var out []string
	for ; i < len(m.sorted) && strings.HasPrefix(m.sorted[i], prefix); i++ {
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, m.sorted[i])
	}
	return out, false, nil
}

// Watch implements Store.
func (m *Memory) Watch(ctx context.Context, prefix string) (*Watcher, error) {
	c := make(chan Event, watchBuffer)
	w := &Watcher{C: c, c: c, done: make(chan struct{})}
	w.stop = func() {
		m.mu.Lock()
		m.dropLocked(w, nil)
		m.mu.Unlock()
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	m.watchers[w] = prefix
	m.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
			w.stop()
		case <-w.done:
		}
	}()
	return w, nil
}

// notify delivers an event to matching watchers; a watcher whose buffer is
// full is dropped rather than allowed to block the store.
func (m *Memory) notify(ev Event) {
	for w, prefix := range m.watchers {
		if !strings.HasPrefix(ev.Name, prefix) {
			continue
		}
		select {
		case w.c <- ev:
		default:
			m.dropLocked(w, ErrWatchOverflow)
		}
	}
}

func (m *Memory) dropLocked(w *Watcher, err error) {
	if _, ok := m.watchers[w]; !ok {
		return
	}
	delete(m.watchers, w)
	w.err = err
	close(w.c)
	close(w.done)
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, owner Owner) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	var mine []string
	for name, e := range m.entries {
		if e.owner == owner {
			mine = append(mine, name)
		}
	}
	slices.Sort(mine) // watchers see removals in a stable order
	for _, name := range mine {
		m.removeLocked(name, m.entries[name])
	}
	return nil
}

// Close ends every watch and wait; later calls fail with ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	for _, ws := range m.waiters {
		for _, w := range ws {
			close(w)
		}
	}
	m.waiters = nil
	for w := range m.watchers {
		m.dropLocked(w, ErrClosed)
	}
	return nil
}

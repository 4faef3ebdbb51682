package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
)

// Do runs fn on an OS thread that has entered the machine's network
// namespace, and returns what fn returns; a panic in fn is raised again
// in the caller. A socket belongs for its whole life to the namespace it
// was made in, so the sockets fn makes stay the machine's after Do
// returns: this is how this process dials from a machine, or listens in
// one (Dial, Listen). Only fn's own goroutine is inside: the goroutines
// it starts are not.
func (m *Machine) Do(fn func() error) error {
	target, err := os.Open(filepath.Join(netnsDir, m.NS))
	if err != nil {
		return fmt.Errorf("netns: entering %s: %w", m.NS, err)
	}
	defer target.Close()
	type result struct {
		err      error
		panicked bool
		value    any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("netns: this thread's namespace: %w", err)}
			return
		}
		defer orig.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("netns: entering %s: %w", m.NS, err)}
			return
		}
		var r result
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.panicked, r.value = true, v
				}
			}()
			r.err = fn()
		}()
		if err := setns(orig); err != nil {
			// The thread stays locked to this goroutine, so Go ends it
			// with the goroutine rather than run others in the machine.
			r.err = errors.Join(r.err, fmt.Errorf("netns: leaving %s: %w", m.NS, err))
			done <- r
			return
		}
		runtime.UnlockOSThread()
		done <- r
	}()
	r := <-done
	if r.panicked {
		panic(r.value)
	}
	return r.err
}

func setns(ns *os.File) error {
	if sysSetns < 0 {
		return fmt.Errorf("setns: %w on %s", errors.ErrUnsupported, runtime.GOARCH)
	}
	if _, _, e := syscall.RawSyscall(uintptr(sysSetns), ns.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
		return e
	}
	return nil
}

// Dial connects to address from inside the machine, as net.Dialer's
// DialContext does.
func (m *Machine) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := m.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Listen listens on address inside the machine, as net.ListenConfig's
// Listen does; the connections it accepts are the machine's too.
func (m *Machine) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	var l net.Listener
	err := m.Do(func() error {
		var lc net.ListenConfig
		var err error
		l, err = lc.Listen(ctx, network, address)
		return err
	})
	return l, err
}

package ump_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/chanos/chanos/interconnect/ump"
)

// Example runs both sides of a ring pair in one process. In real use each
// side is its own process: the creator calls ump.Create and the attacher
// ump.Attach on the two ends of a Unix socket (or the monitor hands each
// side its descriptors, see ump.Open).
func Example() {
	a, b, err := ump.Pipe(&ump.Options{MaxMessageSize: 4096})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	done := make(chan error)
	go func() { // the echo side
		for {
			m, err := b.Receive(ctx) // valid until the next Receive
			if err != nil {
				b.Close()
				done <- err
				return
			}
			if err := b.Send(ctx, append([]byte("echo: "), m...)); err != nil {
				done <- err
				return
			}
		}
	}()

	for _, s := range []string{"hello", "world"} {
		if err := a.Send(ctx, []byte(s)); err != nil {
			fmt.Println(err)
			return
		}
		m, err := a.Receive(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(string(m))
	}
	a.Close()
	fmt.Println("echo side ended with ErrClosed:", errors.Is(<-done, ump.ErrClosed))
	// Output:
	// echo: hello
	// echo: world
	// echo side ended with ErrClosed: true
}

// ExampleConn_SendExclusive is a stream in which one goroutine owns each
// direction, as in C: with the exclusive calls neither side takes a lock,
// and neither may be called from two goroutines at once (a second one
// running beside the first gets ErrBusy, or goes undetected).
func ExampleConn_SendExclusive() {
	a, b, err := ump.Pipe(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	ctx := context.Background()

	go func() { // the only sender on a
		for i := range 3 {
			a.SendExclusive(ctx, fmt.Appendf(nil, "message %d", i))
		}
		a.Close()
	}()
	for { // the only receiver on b
		m, err := b.ReceiveExclusive(ctx)
		if err != nil {
			fmt.Println("then ErrClosed:", errors.Is(err, ump.ErrClosed))
			return
		}
		fmt.Println(string(m))
	}
	// Output:
	// message 0
	// message 1
	// message 2
	// then ErrClosed: true
}

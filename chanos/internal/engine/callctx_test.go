package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// A call that nobody asks anything of during its life ends with its
// return, and says so for good.
func TestCallContextReturned(t *testing.T) {
	c := &callContext{Context: context.Background()}
	if err := c.Err(); err != nil {
		t.Fatalf("Err while the call runs = %v", err)
	}
	c.finish()
	c.end(context.DeadlineExceeded) // a cancel that comes late changes nothing
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after the call returned = %v, want Canceled", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done is open after the call returned")
	}
	if c.slow.Load() != nil {
		t.Error("a call that returned untouched made its slow part")
	}
	// 40 bytes, and 8 for the call SetReplyMetadata reaches.
	if size := unsafe.Sizeof(callContext{}); size > 48 {
		t.Errorf("a callContext is %d bytes, more than 48: what each call allocates grew", size)
	}
}

// Done before the deadline closes at it, with DeadlineExceeded; a cancel
// from the caller ends the context with Canceled, and the return keeps
// that end.
func TestCallContextEnds(t *testing.T) {
	c := newCallContext(context.Background(), 20*time.Millisecond, nil)
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close at the deadline")
	}
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err after the deadline = %v", err)
	}
	c.finish()
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err after the return = %v, want the deadline's", err)
	}

	d := &callContext{Context: context.Background()}
	d.cancel()
	if err := d.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after cancel = %v", err)
	}
	<-d.Done()
	d.finish()

	// The serving context's end is the call's.
	serving, stop := context.WithCancel(context.Background())
	e := &callContext{Context: serving}
	done := e.Done()
	stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close when serving ended")
	}
	if err := e.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err = %v", err)
	}
	e.finish()
}

// A goroutine of the handler that asks for Done as the call returns:
// whichever comes first, the channel it gets closes. Run with -race.
func TestCallContextDoneRacesFinish(t *testing.T) {
	block := make([]callContext, 2000)
	for i := range block {
		c := &block[i]
		c.Context = context.Background()
		var wg sync.WaitGroup
		var got <-chan struct{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got = c.Done()
		}()
		c.finish()
		wg.Wait()
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("a Done asked for as the call returned never closed")
		}
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err = %v, want Canceled", err)
		}
	}
}

// Blocks start small and grow to ctxBlock, and every context handed out
// is a fresh one.
func TestCtxBlocks(t *testing.T) {
	var b ctxBlocks
	seen := map[*callContext]bool{}
	var sizes []int
	for range 1000 {
		if len(b.free) == 0 {
			sizes = append(sizes, min(max(2*b.size, 4), ctxBlock))
		}
		c := b.next(context.Background(), 0, false, nil)
		if seen[c] || c.st.Load() != ctxLive || c.slow.Load() != nil {
			t.Fatal("a context handed out twice, or not fresh")
		}
		seen[c] = true
		c.finish()
	}
	if sizes[0] != 4 || sizes[len(sizes)-1] != ctxBlock || ctxBlock*int(unsafe.Sizeof(callContext{})) > 8<<10 {
		t.Errorf("block sizes %v, want 4 doubling up to %d (8 KiB)", sizes, ctxBlock)
	}
}

// Once Err has reported the deadline, the call's return does not change
// it (the Context contract: successive calls return the same error), and
// Deadline is the earlier of the caller's and the serving context's.
func TestCallContextErrIsFinal(t *testing.T) {
	c := newCallContext(context.Background(), time.Millisecond, nil)
	time.Sleep(5 * time.Millisecond)
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err past the deadline = %v", err)
	}
	c.finish()
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err after the call returned = %v, want DeadlineExceeded still", err)
	}
	serving, cancel := context.WithCancel(context.Background())
	var b ctxBlocks
	d := b.next(serving, time.Hour, true, nil)
	cancel()
	if err := d.Err(); err != context.Canceled {
		t.Fatalf("Err after the serving context's end = %v", err)
	}
	d.finish()
	if err := d.Err(); err != context.Canceled {
		t.Fatalf("Err after the return = %v", err)
	}

	soon, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	want, _ := soon.Deadline()
	e := b.next(soon, time.Hour, true, nil)
	if got, ok := e.Deadline(); !ok || !got.Equal(want) {
		t.Errorf("Deadline = %v, %v; want the serving context's %v", got, ok, want)
	}
	f := b.next(soon, time.Second, true, nil)
	if got, _ := f.Deadline(); !got.Before(want) {
		t.Errorf("Deadline = %v, want the caller's, before %v", got, want)
	}
	e.finish()
	f.finish()
}

package ump

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// The roles of the multi-process tests: the test binary, started by
// startChild, finds its end of the socket on descriptor 3.
var childRoles = []string{"echo", "send-close", "die-mid-write", "stream-forever", "exclusive-unregistered", "scribble"}

func TestMain(m *testing.M) {
	roles := testkit.Roles{}
	for _, role := range childRoles {
		roles[role] = func(args []string) error { return runChild(role, args) }
	}
	testkit.Main(m, roles)
}

// child is a process started by startChild.
type child struct {
	*testkit.Child
	sock *net.UnixConn // the parent's end
}

// startChild starts the test binary in role with args (or, with prog,
// another program) with one end of a new socket pair as descriptor 3.
func startChild(t *testing.T, role string, args []string, prog ...string) *child {
	t.Helper()
	a, b, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	bf, err := b.File()
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	var cmd *exec.Cmd
	if len(prog) > 0 {
		cmd = exec.Command(prog[0], prog[1:]...)
	} else {
		cmd = testkit.Self(role, args...)
	}
	cmd.ExtraFiles = []*os.File{bf}
	return &child{Child: testkit.Start(t, cmd), sock: a}
}

// wait waits for the child to exit and fails the test if it failed.
func (c *child) wait(t *testing.T) {
	t.Helper()
	if err := c.Wait(t); err != nil {
		t.Errorf("child: %v", err)
	}
}

func childConn() (*net.UnixConn, error) {
	return FileConn(os.NewFile(3, "ump-test-socket"))
}

// pattern fills b with the content of message i of a test stream.
func pattern(b []byte, i int) []byte {
	for j := range b {
		b[j] = byte(i*31 + j*7 + j>>8)
	}
	if len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, uint64(i))
	}
	return b
}

func checkPattern(b []byte, i int) error {
	want := pattern(make([]byte, len(b)), i)
	for j := range b {
		if b[j] != want[j] {
			return fmt.Errorf("message %d (%d bytes): byte %d is %#x, want %#x", i, len(b), j, b[j], want[j])
		}
	}
	return nil
}

func runChild(role string, args []string) error {
	arg := ""
	if len(args) > 0 {
		arg = args[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sock, err := childConn()
	if err != nil {
		return err
	}
	registering := make(chan struct{}) // closed to let the registration run
	if role == "exclusive-unregistered" {
		testBeforeRegister = func() { <-registering }
	}
	c, err := Attach(ctx, sock, nil)
	if err != nil {
		return err
	}
	switch role {
	case "echo": // return every message until the peer closes
		defer c.Close()
		for {
			m, err := c.Receive(ctx)
			if err != nil {
				if errors.Is(err, ErrClosed) {
					return nil
				}
				return err
			}
			if err := c.Send(ctx, m); err != nil {
				return err
			}
		}
	case "send-close": // send arg messages, close, exit
		n, _ := strconv.Atoi(arg)
		buf := make([]byte, 300)
		for i := range n {
			if err := c.Send(ctx, pattern(buf[:i%300], i)); err != nil {
				return err
			}
		}
		return c.Close()
	case "die-mid-write": // 3 messages, then 2 of the 5 slots of a 4th; wait for SIGKILL
		buf := make([]byte, 250)
		for i := range 3 {
			if err := c.Send(ctx, pattern(buf[:100], i)); err != nil {
				return err
			}
		}
		c.smu.Lock()
		c.tx.writePartial(pattern(buf, 3), 2)
		fmt.Println("ready")
		select {} // until killed
	case "stream-forever": // large messages until killed
		buf := make([]byte, c.MaxMessageSize())
		fmt.Println("ready")
		for i := 0; ; i++ {
			if err := c.Send(ctx, pattern(buf[:(i*7919)%len(buf)], i)); err != nil {
				return err
			}
		}
	case "exclusive-unregistered":
		// Echo arg messages with the exclusive calls while the membarrier
		// registration is held back, then let it run and echo until the
		// peer closes: the calls must neither wait for it nor need it.
		defer c.Close()
		n, _ := strconv.Atoi(arg)
		echo := func() error {
			m, err := c.ReceiveExclusive(ctx)
			if err != nil {
				return err
			}
			return c.SendExclusive(ctx, m)
		}
		for range n {
			if err := echo(); err != nil {
				return err
			}
		}
		if s := fenceState.Load(); s != 0 {
			return fmt.Errorf("the registration ended (state %d) while it was held back", s)
		}
		close(registering)
		for fenceState.Load() == 0 {
			if ctx.Err() != nil {
				return fmt.Errorf("the registration did not end once let go: %w", ctx.Err())
			}
			time.Sleep(time.Millisecond)
		}
		for {
			if err := echo(); errors.Is(err, ErrClosed) {
				return nil
			} else if err != nil {
				return err
			}
		}
	case "scribble": // write garbage everywhere in shared memory, and signal
		fmt.Println("ready")
		rng := rand.New(rand.NewPCG(1, 2))
		mem := c.mem
		for i := 0; ; i++ {
			off := rng.IntN(len(mem)/8) * 8
			atomic.StoreUint64(word(mem, off), rng.Uint64())
			if i%1024 == 0 {
				off := rng.IntN(len(mem) - 64)
				for j := range 64 {
					mem[off+j] = byte(rng.Uint32())
				}
				wakeSignal(c.txWake)
				wakeSignal(c.rxWake)
			}
		}
	}
	return fmt.Errorf("unknown role %q", role)
}

// writePartial writes the first frags fragments of msg, as a producer
// killed in the middle of write would leave them.
func (t *producer) writePartial(msg []byte, frags int) {
	p := t.tail
	for k := range frags {
		off := int(p&t.mask) * SlotSize
		lo, hi := k*SlotPayload, min((k+1)*SlotPayload, len(msg))
		copy(t.slots[off:], msg[lo:hi])
		info := uint32(k)
		if k == 0 {
			info = infoFirst | uint32(len(msg))
		}
		atomic.StoreUint64(word(t.slots, off+ctrlOff), uint64(uint32(p+1))|uint64(info)<<32)
		p++
	}
}

// untilErr calls f in a new goroutine until it fails, and sends that
// error on the channel it returns: the calls that the tests race against
// Close.
func untilErr(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			if err := f(); err != nil {
				done <- err
				return
			}
		}
	}()
	return done
}

// resources counts what a connection could leak.
type resources struct {
	fds, maps, goroutines int
}

func countResources(t *testing.T) resources {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	// Only the rings' mappings: the runtime maps memory of its own.
	return resources{len(fds), strings.Count(string(maps), "memfd:chanos-ump"), runtime.NumGoroutine()}
}

// checkNoLeaks compares the resources now with before, giving goroutines
// a moment to exit.
func checkNoLeaks(t *testing.T, before resources) {
	t.Helper()
	var now resources
	for range 100 {
		now = countResources(t)
		if now.fds <= before.fds && now.goroutines <= before.goroutines && now.maps <= before.maps {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("leak: before %+v, after %+v", before, now)
}

// cPeer returns the path of the C peer program, or skips the test.
func cPeer(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CHANOS_C_BUILD")
	if dir == "" {
		root, err := filepath.Abs("../..")
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "build", "c")
	}
	p := filepath.Join(dir, "tools", "chanos-ump-peer")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("C peer %s missing (CI is set): %v", p, err)
		}
		t.Skipf("C peer %s not built: run 'make c' (or set CHANOS_C_BUILD)", p)
	}
	return p
}

package hostile

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/pingpong"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/monitor"
	"github.com/chanos/chanos/wire"
)

// Row A: the wake-up attack. The attacker is one end of a ring pair with
// its victim. It clears O_NONBLOCK on every descriptor of the ring pair it
// holds, fills the wake-up sockets towards the victim, announces in shared
// memory, over and over, that it sleeps waiting for data and for space
// (so the victim signals on every message), and keeps making the victim
// send. With wake-ups on shared eventfds, the victim's next signal blocked
// for good and froze its whole process.

func TestWakeupAttack(t *testing.T) {
	const attack = "A: wake-up descriptors: flags cleared, buffers full, sleep announced"
	t.Run("monitor", func(t *testing.T) {
		dir, mon := testkit.StartMonitor(t)
		var before, after usage
		record(t, attack, "monitor (nameservice)", &before, &after)
		before = measure(t, mon.Cmd.Process.Pid)
		a := startAttacker(t, dir, "-bind", nameservice.ServiceName, "-iface", nameservice.InterfaceName)
		keepsServing(t, 2*time.Second, func(ctx context.Context) error { return monitorServes(ctx, dir) })
		a.Kill()
		keepsServing(t, time.Second, func(ctx context.Context) error { return monitorServes(ctx, dir) })
		after = measure(t, mon.Cmd.Process.Pid)
	})
	for _, lang := range []string{"go", "c"} {
		t.Run(lang+"-server", func(t *testing.T) {
			dir, _ := testkit.StartMonitor(t)
			v := server(t, lang, dir, "victim")
			var before, after usage
			record(t, attack, lang+" server", &before, &after)
			before = measure(t, v.proc.Cmd.Process.Pid)
			d := join(t, dir)
			a := startAttacker(t, dir, "-bind", v.name, "-iface", pingpong.InterfaceName)
			keepsServing(t, 2*time.Second, func(ctx context.Context) error { return serves(ctx, d, v.name) })
			a.Kill()
			keepsServing(t, time.Second, func(ctx context.Context) error { return serves(ctx, d, v.name) })
			after = measure(t, v.proc.Cmd.Process.Pid)
		})
	}
	t.Run("go-client", func(t *testing.T) {
		dir, _ := testkit.StartMonitor(t)
		good := goServer(t, dir, "good")
		a := startAttacker(t, dir, "-export", "evil")
		c := testkit.Start(t, testkit.Self("victim-client", "-dir", dir, "-good", good.name, "-evil", "evil"))
		c.Expect(t, "connected")
		var before, after usage
		record(t, attack, "go client (of the attacker's service)", &before, &after)
		before = measure(t, c.Cmd.Process.Pid)
		a.Line(t) // the attacker has the victim's connection
		clientServes(t, c, 2*time.Second)
		a.Kill()
		clientServes(t, c, time.Second)
		after = measure(t, c.Cmd.Process.Pid)
	})
}

// TestWakeupAttackCClient: the C example client against the attacker's
// service, which answers it while attacking its wake-ups: the client must
// complete its run (pings, echoes, a bounce) and exit 0.
func TestWakeupAttackCClient(t *testing.T) {
	const attack = "A: wake-up descriptors: flags cleared, buffers full, sleep announced"
	build := testkit.CBuild(t, "examples/pingpong_client")
	dir, _ := testkit.StartMonitor(t)
	a := startAttacker(t, dir, "-export", "evil")
	cmd := exec.Command(filepath.Join(build, "examples", "pingpong_client"), "-name", "evil", "-n", "200")
	cmd.Env = append(os.Environ(), "CHANOS_DIR="+dir)
	c := testkit.Start(t, cmd)
	var before, after usage
	record(t, attack, "c client (of the attacker's service)", &before, &after)
	a.Expect(t, "attacking")
	before = measure(t, c.Cmd.Process.Pid) // bound: under attack from now
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the C client did not complete its run within 10 s")
	}
	if err := c.Wait(t); err != nil {
		t.Fatalf("the C client failed: %v\n%s", err, strings.Join(c.Remaining(), "\n"))
	}
}

// clientServes checks, for d, that the victim client keeps reporting
// echoes answered by its good server: it exits at once if one takes more
// than a second.
func clientServes(t *testing.T, c *testkit.Child, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		select {
		case <-c.Done():
			t.Fatalf("the victim client ended: %v\n%s", c.Wait(t), strings.Join(c.Remaining(), "\n"))
		default:
		}
	}
	n := len(c.Remaining())
	if n == 0 {
		t.Fatal("the victim client reported no echo")
	}
}

// startAttacker starts the wake-up attacker and waits until it attacks.
func startAttacker(t *testing.T, dir string, args ...string) *testkit.Child {
	t.Helper()
	a := testkit.Start(t, testkit.Self("wake-attacker", append([]string{"-dir", dir}, args...)...))
	a.Expect(t, "ready")
	return a
}

// victimClient is a Go client of two services: evil, the attacker's, which
// it calls without caring whether it answers, and good, whose echoes must
// each come back within a second. It prints a line per good echo.
func victimClient(args []string) error {
	fs := flag.NewFlagSet("victim-client", flag.ContinueOnError)
	dir := fs.String("dir", "", "monitor directory")
	good := fs.String("good", "", "the good service")
	evil := fs.String("evil", "", "the attacker's service")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(*dir), chanos.WithProgram("victim-client"))
	if err != nil {
		return err
	}
	defer d.Close()
	g, err := pingpong.Connect(ctx, d, *good)
	if err != nil {
		return err
	}
	e, err := pingpong.Connect(ctx, d, *evil)
	if err != nil {
		return err
	}
	fmt.Println("connected")
	go func() {
		for i := uint64(0); ; i++ {
			ectx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			e.Echo(ectx, i)
			cancel()
		}
	}()
	for i := uint64(0); ; i++ {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := g.Echo(gctx, i)
		cancel()
		if err != nil || v != i {
			return fmt.Errorf("echo %d on the good service: %v, %v", i, v, err)
		}
		fmt.Println("echo", i)
		time.Sleep(20 * time.Millisecond)
	}
}

// wakeAttacker is the attacker of row A. With -bind it binds to a service
// and calls it; with -export it exports a pingpong service and serves the
// first client that binds. It prints "ready" when it can be attacked
// through (bind: it attacks at once), and, with -export, a line when it
// attacks its client; it runs until it is killed.
func wakeAttacker(args []string) error {
	fs := flag.NewFlagSet("wake-attacker", flag.ContinueOnError)
	dir := fs.String("dir", "", "monitor directory")
	bind := fs.String("bind", "", "service to bind and attack")
	iface := fs.String("iface", "", "its interface: pingpong or nameservice")
	export := fs.String("export", "", "name to export and attack the client of")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	pc, err := seqpacket.Dial(ctx, monitor.SocketPath(*dir), proto.MaxFrameSize)
	if err != nil {
		return err
	}
	mc := chanos.NewConn(seqpacket.NewLink(pc), chanos.Interface{Name: proto.InterfaceName, MaxFrameSize: proto.MaxFrameSize})
	if err := mc.Call(ctx, &proto.HelloCall{Version: proto.ProtocolVersion, Program: "wake-attacker"}, &proto.HelloReply{}); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	var (
		caps     []wire.Cap
		side     ump.Side
		maxFrame uint32
		ifc      chanos.Interface
	)
	if *export != "" {
		ifc = chanos.Interface{Name: pingpong.InterfaceName, MaxFrameSize: pingpong.MaxFrameSize}
		if err := mc.Call(ctx, &proto.ExportCall{Name: *export, Iface: ifc.Name, MaxFrame: uint32(ifc.MaxFrameSize)}, &proto.ExportReply{}); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		fmt.Println("ready")
		in := new(proto.Incoming)
		err := mc.ReceiveFunc(ctx, func(m *chanos.Incoming) error { return m.Decode(in) })
		if err != nil {
			return fmt.Errorf("incoming: %w", err)
		}
		caps, side, maxFrame = in.Fds, ump.Creator, in.MaxFrame
	} else {
		ifc = chanos.Interface{Name: *iface, MaxFrameSize: pingpong.MaxFrameSize}
		if *iface == nameservice.InterfaceName {
			ifc.MaxFrameSize = nameservice.MaxFrameSize
		}
		var r proto.BindReply
		if err := mc.Call(ctx, &proto.BindCall{Name: *bind, Iface: *iface, Wait: true}, &r); err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		caps, side, maxFrame = r.Fds, ump.Attacher, r.MaxFrame
	}
	if len(caps) != ump.CapCount {
		return fmt.Errorf("%d descriptors for the ring pair", len(caps))
	}
	// Copies of the ring pair's descriptors, for the attack; the
	// connection takes the originals.
	var raw []int
	for _, c := range caps[:3] {
		fd, err := dupCap(c)
		if err != nil {
			return err
		}
		raw = append(raw, fd)
	}
	if err := wedge(raw, side); err != nil {
		return err
	}
	u, err := ump.OpenCaps(side, caps, &ump.Options{MaxMessageSize: int(maxFrame), SpinWindow: -1})
	if err != nil {
		return err
	}
	conn := chanos.NewConn(ump.NewLink(u), ifc)
	if *export != "" {
		fmt.Println("attacking")
		return conn.Serve(ctx, func(ctx context.Context, in *chanos.Incoming) (wire.Message, error) {
			return servePingpong(ctx, conn, in)
		})
	}
	fmt.Println("ready")
	for i := uint64(0); ; i++ {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		var err error
		if ifc.Name == nameservice.InterfaceName {
			err = conn.Call(cctx, &nameservice.GetCall{Name: "x"}, &nameservice.GetReply{})
		} else {
			err = conn.Call(cctx, &pingpong.EchoCall{Val: i}, &pingpong.EchoReply{})
		}
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("call %d: %w", i, err)
		}
	}
}

// servePingpong answers one message of the pingpong interface as the
// example server does.
func servePingpong(ctx context.Context, conn *chanos.Conn, in *chanos.Incoming) (wire.Message, error) {
	switch in.Header.Msg {
	case pingpong.MsgPing:
		var m pingpong.Ping
		if err := in.Decode(&m); err != nil {
			return nil, err
		}
		return nil, conn.Send(ctx, &pingpong.Pong{ClientID: m.ClientID, MsgID: m.MsgID})
	case pingpong.MsgEcho:
		var call pingpong.EchoCall
		if err := in.Decode(&call); err != nil {
			return nil, err
		}
		return &pingpong.EchoReply{Result: call.Val}, nil
	case pingpong.MsgBounce:
		var call pingpong.BounceCall
		if err := in.Decode(&call); err != nil {
			return nil, err
		}
		return &pingpong.BounceReply{Reply: call.Payload}, nil
	}
	return nil, nil
}

// wedge attacks the wake-ups of the ring pair whose memfd and side's
// wake-up sockets raw holds: every descriptor goes blocking, the sockets
// fill up, and a goroutine announces, over and over, that this side
// sleeps waiting for data and for space.
func wedge(raw []int, side ump.Side) error {
	buf := make([]byte, 4096)
	for _, fd := range raw {
		if err := syscall.SetNonblock(fd, false); err != nil {
			return err
		}
	}
	for _, fd := range raw[1:] {
		for {
			if _, err := syscall.SendmsgN(fd, buf, nil, nil, syscall.MSG_DONTWAIT); err != nil {
				break
			}
		}
	}
	mem, err := syscall.Mmap(raw[0], 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return err
	}
	// docs/ump.md, "Ring format": ring r's control words are at
	// 512 + 512r; prod_wait at +0, cons_wait at +256.
	s, peer := int(side), 1-int(side)
	prodWait := (*uint64)(unsafe.Pointer(&mem[512+512*s]))
	consWait := (*uint64)(unsafe.Pointer(&mem[512+512*peer+256]))
	// The numbers never repeat, nor meet those this side's own waits
	// announce (1, 2, 3, ...): the victim signals every one of them, and
	// this side's own connection keeps its wake-ups, so that it goes on
	// making the victim signal.
	go func() {
		for n := uint64(1 << 40); ; n++ {
			atomic.StoreUint64(prodWait, n)
			atomic.StoreUint64(consWait, n)
			time.Sleep(10 * time.Microsecond)
		}
	}()
	return nil
}

// dupCap returns a descriptor of its own for a received capability.
func dupCap(c wire.Cap) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("capability %T has no descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(u uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, u, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = e
			return
		}
		fd = int(r)
	}); err != nil {
		return -1, err
	}
	return fd, derr
}

package monitor

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/nameservice"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// seedFrames returns valid frames of an interface's calls, for fuzzing
// seeds; the fuzzer mutates them into near misses.
func seedFrames(f *testing.F, msgs ...wire.Message) {
	for i, m := range msgs {
		var buf wire.Buffer
		if err := m.Encode(&buf); err != nil {
			f.Fatal(err)
		}
		wire.SetCallID(buf.B, uint32(i))
		f.Add(buf.B)
	}
	f.Add([]byte{})
	f.Add([]byte{16, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0})
}

// Whatever a domain sends after hello, the monitor neither crashes nor
// stops serving the others.
func FuzzSessionFrame(f *testing.F) {
	seedFrames(f,
		&proto.HelloCall{Version: 1, Program: "p"},
		&proto.ExportCall{Name: "n", Iface: "kv", MaxFrame: 64},
		&proto.WithdrawCall{Name: "n"},
		&proto.BindCall{Name: "n", Iface: "kv"},
		&proto.BindCall{Name: nameservice.ServiceName, Iface: nameservice.InterfaceName},
		&proto.PsCall{},
		&proto.HelloReply{},
		&proto.Incoming{},
	)
	tm := startMonitor(f, Config{Logger: discardLogger()})
	good, err := Dial(context.Background(), tm.dir, "good")
	if err != nil {
		f.Fatal(err)
	}
	defer good.Close()
	f.Fuzz(func(t *testing.T, frame []byte) {
		uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: tm.Socket(), Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		r := &rawConn{t: t, uc: uc}
		r.hello()
		if len(frame) > 0 {
			r.send(frame)
		}
		// Read the answers, if any, until the hang-up or a pause.
		uc.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		buf, oob := make([]byte, 1<<20), make([]byte, 256)
		for {
			n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
			closeRights(oob[:oobn]) // a bind's descriptors
			if err != nil || (n == 0 && oobn == 0) {
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := good.Ps(ctx); err != nil {
			t.Fatalf("the good session after %x: %v", frame, err)
		}
	})
}

// closeRights closes the descriptors of a control message.
func closeRights(oob []byte) {
	msgs, _ := syscall.ParseSocketControlMessage(oob)
	for i := range msgs {
		fds, _ := syscall.ParseUnixRights(&msgs[i])
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
}

// Whatever a client writes on its nameservice ring, the monitor neither
// crashes nor stops serving the others.
func FuzzNameserviceFrame(f *testing.F) {
	seedFrames(f,
		&nameservice.SetCall{Name: "a", Ref: iref(1)},
		&nameservice.GetCall{Name: "a"},
		&nameservice.WaitForCall{Name: "a"},
		&nameservice.GetCountCall{Class: "a"},
		&nameservice.RemoveCall{Name: "a"},
		&nameservice.ListCall{Prefix: "", After: ""},
		&nameservice.Watch{Prefix: "a"},
		&nameservice.Changed{Name: "a"},
		&nameservice.SetReply{},
	)
	tm := startMonitor(f, Config{Logger: discardLogger()})
	ctx := context.Background()
	cli, err := Dial(ctx, tm.dir, "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	defer cli.Close()
	good, err := cli.Nameservice(ctx)
	if err != nil {
		f.Fatal(err)
	}
	defer good.Close()
	f.Fuzz(func(t *testing.T, frame []byte) {
		r, err := cli.Bind(ctx, nameservice.ServiceName, nameservice.InterfaceName, false)
		if err != nil {
			t.Fatal(err)
		}
		u, err := OpenUMP(ump.Attacher, r.Fds, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		if err := u.Send(ctx, frame); err != nil {
			return // too large for the ring: refused on this side
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		u.Receive(rctx)
		cancel()
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, _, err := good.Get(gctx, nameservice.ServiceName); err != nil {
			t.Fatalf("the good connection after %x: %v", frame, err)
		}
	})
}

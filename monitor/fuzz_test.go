package monitor

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/nameservice"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/testkit"
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

// quotaFuzzConfig is a monitor whose every quota a few calls reach.
var quotaFuzzConfig = Config{
	MaxDomains: 6, MaxExports: 2, MaxTotalExports: 3, MaxNSConns: 1, MaxTotalNSConns: 2,
	MaxNames: 2, MaxTotalNames: 3, MaxPendingBinds: 1, MaxTotalPendingBinds: 2, MaxTotalWatches: 2,
	MaxConnRecords: 2, MaxReplyMemory: 256 << 10, MaxTotalReplyMemory: 512 << 10,
	IdleTimeout: 20 * time.Millisecond, PingTimeout: 40 * time.Millisecond,
}

// A program of requests from a few domains, against a monitor whose
// quotas they all reach: the monitor never holds more than a quota
// allows, whatever the order of requests, refusals and departures; when
// the domains leave, every quota is given back whole; and a bystander is
// served throughout.
func FuzzQuotaRequests(f *testing.F) {
	f.Add([]byte{0, 0, 2, 0, 2, 1, 2, 2, 6, 0, 7, 0, 8, 0, 8, 1, 8, 2, 9, 0, 10, 0, 11, 0, 11, 0, 11, 0})
	f.Add([]byte{0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 6, 0, 6, 1, 6, 2, 1, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 1, 2, 0, 4, 0, 4, 0, 4, 0, 5, 3, 5, 3, 12, 1, 13, 7, 1, 1, 4, 0})
	f.Add([]byte{0, 0, 7, 0, 7, 0, 0, 1, 7, 1, 8, 1, 8, 1, 8, 2, 8, 3, 12, 0, 12, 0, 12, 0, 3, 0, 1, 0})
	tm := startMonitor(f, quotaFuzzConfig)
	good, err := Dial(context.Background(), tm.dir, "good")
	if err != nil {
		f.Fatal(err)
	}
	defer good.Close()
	f.Fuzz(func(t *testing.T, prog []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		type slot struct {
			c   *Client
			nss []*NSClient
		}
		var slots [3]slot
		drop := func(s *slot) {
			for _, ns := range s.nss {
				ns.Close()
			}
			if s.c != nil {
				s.c.Close()
			}
			*s = slot{}
		}
		defer func() {
			for i := range slots {
				drop(&slots[i])
			}
		}()
		short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 10*time.Millisecond) }
		for i := 0; i+1 < len(prog) && i < 64; i += 2 {
			op, arg := prog[i]%14, prog[i+1]
			s := &slots[arg%3]
			name := fmt.Sprintf("f%d", arg%4)
			if op != 0 && op != 13 && s.c == nil {
				continue
			}
			var ns *NSClient
			if len(s.nss) > 0 {
				ns = s.nss[int(arg)%len(s.nss)]
			}
			switch op {
			case 0:
				if s.c == nil {
					s.c, _ = Dial(ctx, tm.dir, "fuzz") // refused when full
				}
			case 1:
				drop(s)
			case 2:
				s.c.Export(ctx, name, "kv", 1024)
			case 3:
				s.c.Withdraw(ctx, name)
			case 4:
				if r, err := s.c.Bind(ctx, name, "kv", false); err == nil {
					closeCaps(r.Fds)
				}
			case 5:
				bctx, cancel := short()
				if r, err := s.c.Bind(bctx, name+".later", "kv", true); err == nil {
					closeCaps(r.Fds)
				}
				cancel()
			case 6:
				s.c.PsJSON(ctx)
			case 7:
				if ns, err := s.c.Nameservice(ctx); err == nil {
					s.nss = append(s.nss, ns)
				}
			case 8:
				if ns != nil {
					ns.Set(ctx, fmt.Sprintf("n%d", arg%5), iref(arg|1))
				}
			case 9:
				if ns != nil {
					ns.Remove(ctx, fmt.Sprintf("n%d", arg%5))
				}
			case 10:
				if ns != nil {
					ns.List(ctx, "", "")
				}
			case 11:
				if ns != nil {
					ns.Watch(ctx, "w")
				}
			case 12:
				if ns != nil {
					wctx, cancel := short()
					ns.WaitFor(wctx, "never")
					cancel()
				}
			case 13:
				// A raw session: hello, then the rest of the program as
				// one frame, and a hang-up.
				uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: tm.Socket(), Net: "unixpacket"})
				if err == nil {
					uc.Write(encode(t, &proto.HelloCall{Version: proto.ProtocolVersion, Program: "raw"}, 1))
					uc.Write(prog[i+2:])
					uc.Close()
				}
			}
			tm.checkQuotas(t)
		}
		if _, err := good.Ps(ctx); err != nil {
			t.Fatalf("the bystander's ps: %v", err)
		}
		for i := range slots {
			drop(&slots[i])
		}
		// Everything is given back once the domains have left.
		testkit.Eventually(t, "the quotas to be given back", func() bool {
			tm.mu.Lock()
			defer tm.mu.Unlock()
			return len(tm.sessions) == 1 && tm.names == 0 && tm.nsConnCount == 0 && tm.watches == 0 &&
				tm.waits.Load() == 0 && len(tm.exports) == 1 && len(tm.conns) == 0 && len(tm.served) == 0 &&
				tm.replyMem == tm.domains[good.DomainID()].replyMem
		})
	})
}

// checkQuotas fails the test if the monitor holds more than a quota
// allows.
func (tm *testMonitor) checkQuotas(t *testing.T) {
	t.Helper()
	tm.mu.Lock()
	defer tm.mu.Unlock()
	c := tm.cfg
	fail := func(what string, n, max int) {
		if n > max || n < 0 {
			t.Fatalf("%s: %d, quota %d", what, n, max)
		}
	}
	fail("sessions", len(tm.sessions), c.MaxDomains)
	fail("exports", len(tm.exports)-1, c.MaxTotalExports)
	fail("nameservice connections", tm.nsConnCount, c.MaxTotalNSConns)
	fail("names", tm.names, c.MaxTotalNames)
	fail("watches", tm.watches, c.MaxTotalWatches)
	fail("waits", int(tm.waits.Load()), c.MaxTotalPendingBinds)
	fail("reply memory", tm.replyMem, c.MaxTotalReplyMemory)
	for s := range tm.sessions {
		fail("a domain's exports", len(s.exports), c.MaxExports)
		fail("a domain's nameservice connections", s.nsConns, c.MaxNSConns)
		fail("a domain's names", len(s.nsNames)+s.nsNamesPending, c.MaxNames)
		fail("a domain's binds", s.pendingBinds(), c.MaxPendingBinds)
		fail("a domain's reply memory", s.replyMem, c.MaxReplyMemory)
		fail("a domain's connection records", len(s.records), c.MaxConnRecords)
	}
}

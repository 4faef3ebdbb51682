package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/monitor"
	"github.com/chanos/chanos/wire"
)

// frame returns a wire frame (a plain message) with body.
func frame(msg uint16, body []byte) []byte {
	b := wire.AppendHeader(nil, wire.Header{Size: uint32(wire.HeaderSize + len(body)), Msg: msg})
	return append(b, body...)
}

// pair dials b's listener from a, and returns both ends.
func pair(t *testing.T, a, b *machine, ln *Listener) (dialled, accepted *Link) {
	t.Helper()
	ctx := testkit.Context(t)
	d, err := Dial(ctx, ln.Addr().String(), a.id, a.opts())
	if err != nil {
		t.Fatalf("dial: %v\ndialler's log:\n%s\nlistener's log:\n%s", err, a.log.String(), b.log.String())
	}
	t.Cleanup(func() { d.Close() })
	acc, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { acc.Close() })
	return d, acc
}

// receive returns the next frame of l, copied.
func receive(t *testing.T, l *Link) ([]byte, error) {
	t.Helper()
	var in interconnect.Incoming
	err := l.Receive(testkit.Context(t), &in)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(in.Frame), nil
}

// TestLinkExchange: two admitted machines connect, each learns the
// other's name, and frames of all sizes up to the bound go both ways in
// order.
func TestLinkExchange(t *testing.T) {
	root := newRoot(t, "lab")
	a, b := newMachine(t, root, "alpha"), newMachine(t, root, "beta")
	ln := b.listen(t)
	d, acc := pair(t, a, b, ln)
	if p := d.Peer(); p.Machine != "beta" || p.Cluster != "lab" || p.KeyID != b.id.KeyID() {
		t.Errorf("dialler sees peer %+v, want beta of lab with key %s", p, b.id.KeyID())
	}
	if p := acc.Peer(); p.Machine != "alpha" || p.Serial != SerialString(a.id.Certificate().SerialNumber) {
		t.Errorf("listener sees peer %+v, want alpha", p)
	}
	var sent [][]byte
	for i, n := range []int{0, 1, 100, 5000, 70000, DefaultMaxFrameSize - wire.HeaderSize} {
		body := bytes.Repeat([]byte{byte(i + 1)}, n)
		f := frame(uint16(i+1), body)
		sent = append(sent, f)
	}
	ctx := testkit.Context(t)
	go func() {
		for _, f := range sent {
			if err := d.SendFrame(ctx, f, nil); err != nil {
				t.Errorf("send: %v", err)
				return
			}
		}
	}()
	for i, want := range sent {
		got, err := receive(t, acc)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d: got %d bytes, want %d", i, len(got), len(want))
		}
	}
	// And back.
	if err := acc.SendFrame(ctx, frame(9, []byte("pong")), nil); err != nil {
		t.Fatal(err)
	}
	if got, err := receive(t, d); err != nil || !bytes.Equal(got, frame(9, []byte("pong"))) {
		t.Fatalf("reply: %q, %v", got, err)
	}
	if sent, err := d.TrySendFrame(frame(10, nil), nil); !sent || err != nil {
		t.Fatalf("TrySendFrame: %v, %v", sent, err)
	}
	if got, err := receive(t, acc); err != nil || !bytes.Equal(got, frame(10, nil)) {
		t.Fatalf("after TrySendFrame: %q, %v", got, err)
	}

	// What the link refuses to send leaves it open.
	if err := d.SendFrame(ctx, frame(1, make([]byte, DefaultMaxFrameSize)), nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversize send: %v, want ErrFrameTooLarge", err)
	}
	if err := d.SendFrame(ctx, frame(1, nil), []wire.Cap{nopCap{}}); !errors.Is(err, interconnect.ErrCapsUnsupported) {
		t.Errorf("send with a capability: %v, want ErrCapsUnsupported", err)
	}
	if err := d.SendFrame(ctx, []byte("short"), nil); err == nil {
		t.Error("a send of a malformed frame succeeded")
	}
	// A receive whose context ends loses nothing.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	var in interconnect.Incoming
	if err := acc.Receive(short, &in); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive with nothing sent: %v", err)
	}
	cancel()
	if err := d.SendFrame(ctx, frame(11, []byte("still")), nil); err != nil {
		t.Fatal(err)
	}
	if got, err := receive(t, acc); err != nil || !bytes.Equal(got, frame(11, []byte("still"))) {
		t.Fatalf("after a receive's deadline: %q, %v", got, err)
	}

	// The close reaches the peer as ErrClosed.
	d.Close()
	if _, err := receive(t, acc); !errors.Is(err, interconnect.ErrClosed) {
		t.Fatalf("after the peer's close: %v, want ErrClosed", err)
	}
	if err := d.SendFrame(ctx, frame(1, nil), nil); !errors.Is(err, interconnect.ErrClosed) {
		t.Fatalf("send after close: %v, want ErrClosed", err)
	}

	// Dialling for a named machine checks the name.
	if _, err := Dial(ctx, ln.Addr().String(), a.id, &Options{Machine: "gamma", Logger: a.log.logger()}); !errors.Is(err, ErrWrongMachine) {
		t.Fatalf("dial for gamma reaching beta: %v, want ErrWrongMachine", err)
	}
	a.log.waitLog(t, "cluster link refused", `reason="wrong machine"`)
	l2, err := Dial(ctx, ln.Addr().String(), a.id, &Options{Machine: "beta", Logger: a.log.logger()})
	if err != nil {
		t.Fatalf("dial for beta: %v", err)
	}
	l2.Close()
}

type nopCap struct{}

func (nopCap) Close() error { return nil }

// TestUnadmittedRefused: a machine whose credential comes from another
// root, claiming this cluster's name or naming another cluster, is
// refused by an admitted machine, whether it dials or is dialled, and
// the refusing side logs why.
func TestUnadmittedRefused(t *testing.T) {
	root := newRoot(t, "lab")
	good := newMachine(t, root, "alpha")
	for _, c := range []struct {
		name    string
		root    *Root
		reason  string
		wantErr error
	}{
		{"self-made root claiming the cluster", newRoot(t, "lab"), "unknown root", ErrUnknownRoot},
		{"another cluster's root", newRoot(t, "other"), "wrong cluster", ErrWrongCluster},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := newMachine(t, c.root, "mallory")
			ctx := testkit.Context(t)

			// The unadmitted machine dials with its credential, without
			// checking the listener's (an attacker would not): the listener
			// refuses it.
			ln := good.listen(t)
			tc, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13,
				Certificates: []tls.Certificate{bad.id.tlsCert()}})
			if err == nil {
				tc.SetDeadline(time.Now().Add(testkit.Limit))
				_, err = io.ReadFull(tc, make([]byte, len(preamble)))
				tc.Close()
			}
			if err == nil {
				t.Fatal("an unadmitted machine read the listener's preamble")
			}
			good.log.waitLog(t, "cluster link refused", "side=accept", `reason="`+c.reason+`"`)
			// Through Dial, which checks the listener too, it is refused as
			// well (by itself first, as it does not know this cluster's root).
			if _, err := Dial(ctx, ln.Addr().String(), bad.id, bad.opts()); !errors.Is(err, ErrRefused) {
				t.Fatalf("dial by an unadmitted machine: %v, want a refusal", err)
			}

			// It listens: the admitted dialler refuses it.
			bln := bad.listen(t)
			_, err = Dial(ctx, bln.Addr().String(), good.id, good.opts())
			if !errors.Is(err, c.wantErr) || !errors.Is(err, ErrRefused) {
				t.Fatalf("dial to an unadmitted machine: %v, want %v", err, c.wantErr)
			}
			good.log.waitLog(t, "cluster link refused", "side=dial", `reason="`+c.reason+`"`)

			// Nothing was accepted on either side.
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if l, err := ln.Accept(short); err == nil {
				l.Close()
				t.Fatal("the listener accepted the unadmitted machine")
			}
		})
	}
}

// TestNoClientCertificate: a TLS client that presents no certificate is
// refused, and so is a client that does not speak TLS, each with its
// reason logged.
func TestNoClientCertificate(t *testing.T) {
	root := newRoot(t, "lab")
	m := newMachine(t, root, "alpha")
	ln := m.listen(t)
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(testkit.Limit))
		_, err = io.ReadFull(c, make([]byte, 8))
	}
	if err == nil {
		t.Fatal("a client without a certificate read the listener's preamble")
	}
	m.log.waitLog(t, "cluster link refused", `reason="no client cert"`)

	// Nor does a client that does not speak TLS get anywhere.
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	m.log.waitLog(t, "cluster link refused", `reason="handshake failed"`)
}

// TestRevoked: once a machine loads a list that revokes a peer, its open
// links to that peer end, and new ones are refused whichever side dials,
// including links dialled after an update at run time. An older list, or
// one another root signed, is not taken.
func TestRevoked(t *testing.T) {
	root := newRoot(t, "lab")
	a, b := newMachine(t, root, "alpha"), newMachine(t, root, "beta")
	ln := b.listen(t)
	d, acc := pair(t, a, b, ln)
	ctx := testkit.Context(t)

	before, err := root.RevocationList()
	if err != nil {
		t.Fatal(err)
	}
	list, err := root.Revoke(a.id.Certificate().SerialNumber)
	if err != nil {
		t.Fatal(err)
	}
	// beta learns of it at run time (as it would from etcd).
	if err := b.id.Revocations.Update(list); err != nil {
		t.Fatal(err)
	}
	if _, err := receive(t, acc); !errors.Is(err, ErrRevoked) || !errors.Is(err, interconnect.ErrClosed) {
		t.Fatalf("beta's open link to alpha after the update: %v, want ErrClosed and ErrRevoked", err)
	}
	if _, err := receive(t, d); !errors.Is(err, interconnect.ErrClosed) {
		t.Fatalf("alpha's end of the link: %v, want ErrClosed", err)
	}
	b.log.waitLog(t, "cluster link ended", "peer=alpha", `reason=revoked`)

	// alpha dials again: refused.
	if _, err := Dial(ctx, ln.Addr().String(), a.id, a.opts()); !errors.Is(err, ErrRefused) {
		t.Fatalf("revoked alpha dials: %v, want a refusal", err)
	}
	b.log.waitLog(t, "cluster link refused", "side=accept", "reason=revoked")
	// beta dials alpha: refused too.
	aln := a.listen(t)
	if _, err := Dial(ctx, aln.Addr().String(), b.id, b.opts()); !errors.Is(err, ErrRevoked) {
		t.Fatalf("beta dials revoked alpha: %v, want ErrRevoked", err)
	}
	b.log.waitLog(t, "cluster link refused", "side=dial", "reason=revoked")

	// A third machine loads the list from its files (as a monitor does at
	// start) and refuses alpha too; beta, never revoked, it takes.
	c := newMachine(t, root, "gamma")
	if err := InstallRevocations(c.dir, CRLPEM(list)); err != nil {
		t.Fatal(err)
	}
	cid, err := LoadIdentity(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	c.id = cid
	cln := c.listen(t)
	if _, err := Dial(ctx, cln.Addr().String(), a.id, a.opts()); !errors.Is(err, ErrRefused) {
		t.Fatalf("revoked alpha dials gamma: %v, want a refusal", err)
	}
	c.log.waitLog(t, "cluster link refused", "reason=revoked")
	l, err := Dial(ctx, cln.Addr().String(), b.id, b.opts())
	if err != nil {
		t.Fatalf("beta dials gamma: %v", err)
	}
	l.Close()

	// No going back to the older list, by either path.
	if err := b.id.Revocations.Update(before); !errors.Is(err, ErrStaleRevocations) {
		t.Fatalf("update to the older list: %v, want ErrStaleRevocations", err)
	}
	if err := InstallRevocations(c.dir, before); !errors.Is(err, ErrStaleRevocations) {
		t.Fatalf("install of the older list: %v, want ErrStaleRevocations", err)
	}
	// Nor to a list signed by another root.
	other := newRoot(t, "lab")
	forged, err := other.Revoke()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.id.Revocations.Update(forged); !errors.Is(err, ErrBadRevocations) {
		t.Fatalf("update to another root's list: %v, want ErrBadRevocations", err)
	}
	if err := b.id.Revocations.Check(a.id.Certificate()); !errors.Is(err, ErrRevoked) {
		t.Fatalf("after the refused updates alpha is no longer revoked: %v", err)
	}
}

// TestExpired: a machine whose credential has expired is refused by
// either side, with the reason logged.
func TestExpired(t *testing.T) {
	root := newRoot(t, "lab")
	good := newMachine(t, root, "alpha")
	old := expiredMachine(t, root, "old")
	ctx := testkit.Context(t)
	ln := good.listen(t)
	if _, err := Dial(ctx, ln.Addr().String(), old.id, old.opts()); !errors.Is(err, ErrRefused) {
		t.Fatalf("expired machine dials: %v, want a refusal", err)
	}
	good.log.waitLog(t, "cluster link refused", "side=accept", "reason=expired")
	oln := old.listen(t)
	if _, err := Dial(ctx, oln.Addr().String(), good.id, good.opts()); !errors.Is(err, ErrExpired) {
		t.Fatalf("dial to an expired machine: %v, want ErrExpired", err)
	}
	good.log.waitLog(t, "cluster link refused", "side=dial", "reason=expired")
}

// TestHandshakeStall: a peer that connects and sends nothing is cut off
// when the handshake timeout passes, holds no more than its own
// handshake meanwhile, and a dial to a listener that never answers ends
// at the timeout too.
func TestHandshakeStall(t *testing.T) {
	root := newRoot(t, "lab")
	a, b := newMachine(t, root, "alpha"), newMachine(t, root, "beta")
	ln, err := Listen("127.0.0.1:0", b.id, &Options{Logger: b.log.logger(), HandshakeTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	readEnd := func(c net.Conn, what string) {
		t.Helper()
		err := testkit.Within(t, testkit.Limit, what, func() error {
			_, err := c.Read(make([]byte, 1))
			return err
		})
		if err == nil {
			t.Fatalf("%s: read data, want the connection's end", what)
		}
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readEnd(c, "a stalled connection")
	b.log.waitLog(t, "cluster link refused", `reason="handshake timeout"`)

	// With one handshake allowed at a time, a second connection while one
	// stalls is closed at once, and the log says so.
	var lb logBuf
	one, err := Listen("127.0.0.1:0", b.id, &Options{Logger: lb.logger(), HandshakeTimeout: time.Hour, MaxHandshakes: 1})
	if err != nil {
		t.Fatal(err)
	}
	first, err := net.Dial("tcp", one.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := net.Dial("tcp", one.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	readEnd(second, "the connection over the limit")
	lb.waitLog(t, "cluster link refused", `reason="too many handshakes"`)
	// Closing the listener ends the handshake it still runs.
	one.Close()
	readEnd(first, "a stalled connection at the listener's close")

	// The listener still takes a real peer.
	d, acc := pair(t, a, b, ln)
	d.Close()
	acc.Close()

	// A listener that accepts and never speaks: Dial ends at its timeout.
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	go func() {
		for {
			c, err := raw.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	err = testkit.Within(t, testkit.Limit, "dial to a silent listener", func() error {
		_, err := Dial(testkit.Context(t), raw.Addr().String(), a.id, &Options{HandshakeTimeout: 300 * time.Millisecond, Logger: a.log.logger()})
		return err
	})
	if !errors.Is(err, ErrHandshakeTimeout) {
		t.Fatalf("dial to a silent listener: %v, want ErrHandshakeTimeout", err)
	}
	// The caller's context bounds it as well.
	ctx, cancel := context.WithTimeout(testkit.Context(t), 100*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, raw.Addr().String(), a.id, a.opts()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial to a silent listener with a short context: %v, want DeadlineExceeded", err)
	}
}

// TestMalformedFrame: a peer that sends a frame longer than the bound,
// or a header that lies, ends its link with ErrProtocol; the listener
// goes on.
func TestMalformedFrame(t *testing.T) {
	root := newRoot(t, "lab")
	a, b := newMachine(t, root, "alpha"), newMachine(t, root, "beta")
	ln := b.listen(t)
	for _, c := range []struct {
		name string
		raw  []byte
	}{
		{"size past the bound", wire.AppendHeader(nil, wire.Header{Size: DefaultMaxFrameSize + 1, Msg: 1})},
		{"size under the header", wire.AppendHeader(nil, wire.Header{Size: 3, Msg: 1})},
		{"capabilities announced", wire.AppendHeader(nil, wire.Header{Size: wire.HeaderSize, Msg: 1, NCaps: 1})},
		{"bad flags", wire.AppendHeader(nil, wire.Header{Size: wire.HeaderSize, Msg: 1, Flags: 0x70})},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, acc := pair(t, a, b, ln)
			if _, err := d.conn.Write(c.raw); err != nil { // past SendFrame's checks
				t.Fatal(err)
			}
			if _, err := receive(t, acc); !errors.Is(err, interconnect.ErrProtocol) {
				t.Fatalf("receive: %v, want ErrProtocol", err)
			}
			if _, err := receive(t, d); !errors.Is(err, interconnect.ErrClosed) {
				t.Fatalf("the sender's end: %v, want ErrClosed", err)
			}
		})
	}
}

// TestExpiryEndsLink: a link whose peer's credential expires while it is
// open ends then, on the side that checks it, with ErrExpired.
func TestExpiryEndsLink(t *testing.T) {
	root := newRoot(t, "lab")
	b := newMachine(t, root, "beta")
	// A credential of a few seconds: certificates count whole seconds, so
	// it has at least 3 s left when the link is made.
	a := &machine{dir: filepath.Join(testkit.ShortDir(t), "m")}
	if err := monitor.PrepareDir(a.dir); err != nil {
		t.Fatal(err)
	}
	key, err := LoadOrCreateKey(a.dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cred, err := root.Admit(key.Public().(ed25519.PublicKey), "brief", now.Add(-time.Minute), now.Add(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if a.id, err = Join(a.dir, root.Bundle(cred), nil); err != nil {
		t.Fatal(err)
	}
	ln := b.listen(t)
	d, err := Dial(testkit.Context(t), ln.Addr().String(), a.id, a.opts())
	if errors.Is(err, ErrExpired) {
		t.Skip("the handshake took longer than the credential's life")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	acc, err := ln.Accept(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	defer acc.Close()
	if _, err := receive(t, acc); !errors.Is(err, ErrExpired) || !errors.Is(err, interconnect.ErrClosed) {
		t.Fatalf("beta's link to brief after its credential expired: %v, want ErrClosed and ErrExpired", err)
	}
	if time.Now().Before(cred.NotAfter) {
		t.Fatalf("the link ended before the credential expired (%v)", cred.NotAfter)
	}
	b.log.waitLog(t, "cluster link ended", "peer=brief", "reason=expired")
}

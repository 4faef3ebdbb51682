package net_test

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/internal/testkit"
)

// identities makes a server and a client identity, and the options of
// each side: the client pins the server's certificate, and the server
// admits the client's certificate once.
func identities(t *testing.T) (srv, cli *cnet.Identity, so, co *cnet.Options) {
	t.Helper()
	var err error
	if srv, err = cnet.NewIdentity(); err != nil {
		t.Fatal(err)
	}
	if cli, err = cnet.NewIdentity(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	so = &cnet.Options{TLS: &cnet.TLS{Identity: srv, Admit: func(_ string, fp [32]byte) bool {
		ok := false
		if fp == cli.Fingerprint {
			once.Do(func() { ok = true })
		}
		return ok
	}}}
	co = &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: srv.Fingerprint}}
	return
}

// With TLS and pinned certificates, frames stream both ways through a
// proxy that resets the connection at random points: each resume is a
// new TLS handshake with the same two certificates.
func TestTLSStreamThroughCuts(t *testing.T) {
	testkit.NoLeaks(t)
	_, _, so, co := identities(t)
	for _, o := range []*cnet.Options{so, co} {
		o.RedialMin, o.RedialMax, o.WindowFrames, o.WindowBytes = time.Millisecond, 10*time.Millisecond, 32, 256<<10
	}
	L := listen(t, so)
	p := proxy(t, L)
	cl, sl := connect(t, L, p.Addr(), co)
	p.CutRandom(1, 200<<10)
	streamBothWays(t, cl, sl, 1000, 20000)
	t.Logf("%d cuts, %d resumes", p.Cuts(), cl.Resumes())
	if cl.Resumes() < 20 {
		t.Errorf("only %d resumes", cl.Resumes())
	}
}

// A server whose certificate is not the pinned one, and a client whose
// certificate is not admitted (or admitted once already), are refused.
func TestTLSRefusals(t *testing.T) { refusals(t, false) }

func refusals(t *testing.T, authOnly bool) {
	testkit.NoLeaks(t)
	_, cli, so, co := identities(t)
	so.TLS.AuthOnly, co.TLS.AuthOnly = authOnly, authOnly
	ctx := testkit.Context(t)
	L := listen(t, so)
	cl, err := cnet.Dial(ctx, L.Addr().String(), co)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sl, err := L.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()

	if _, err := cnet.Dial(ctx, L.Addr().String(), co); !errors.Is(err, cnet.ErrAuth) {
		t.Errorf("a second connection with a certificate admitted once: %v, want ErrAuth", err)
	}
	other, _ := cnet.NewIdentity()
	if _, err := cnet.Dial(ctx, L.Addr().String(), &cnet.Options{TLS: &cnet.TLS{Identity: other, Peer: so.TLS.Identity.Fingerprint, AuthOnly: authOnly}}); !errors.Is(err, cnet.ErrAuth) {
		t.Errorf("a client not admitted: %v, want ErrAuth", err)
	}
	if _, err := cnet.Dial(ctx, L.Addr().String(), &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: other.Fingerprint, AuthOnly: authOnly}}); !errors.Is(err, cnet.ErrAuth) {
		t.Errorf("a server whose certificate is not pinned: %v, want ErrAuth", err)
	}

	// Whoever learnt the connection's id, without its certificate, cannot
	// resume it: the listener answers as if it did not know the id.
	proto := "chanos-net"
	if authOnly {
		proto = "chanos-net-auth"
	}
	tc, err := tls.Dial("tcp", L.Addr().String(), &tls.Config{Certificates: []tls.Certificate{other.Cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, NextProtos: []string{proto}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	id := cl.ID()
	h := make([]byte, 24+36)
	h[0] = 4
	binary.LittleEndian.PutUint32(h[4:], 36)
	copy(h[24:], "chnt")
	binary.LittleEndian.PutUint16(h[28:], 1)
	binary.LittleEndian.PutUint16(h[30:], 1) // resume
	copy(h[32:48], id[:])
	binary.LittleEndian.PutUint32(h[48:], 1<<20)
	binary.LittleEndian.PutUint32(h[52:], 64)
	binary.LittleEndian.PutUint32(h[56:], 1<<20)
	if _, err := tc.Write(h); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 28)
	if _, err := io.ReadFull(bufio.NewReader(tc), reply); err != nil || reply[0] != 5 || reply[24] != 1 {
		t.Errorf("a resume with a stolen id: % x, %v; want a reject (unknown connection)", reply, err)
	}
	if err := cl.Err(); err != nil {
		t.Errorf("the connection ended: %v", err)
	}
}

// One listener serves several connections, each with its own server
// certificate chosen by the server name the client asks for, and admits
// each client certificate only with the name it was granted for.
func TestTLSSelectByServerName(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testkit.Context(t)
	type grant struct{ srv, cli *cnet.Identity }
	grants := map[string]grant{}
	for _, name := range []string{"c0001", "c0002"} {
		srv, err := cnet.NewIdentity()
		if err != nil {
			t.Fatal(err)
		}
		cli, err := cnet.NewIdentity()
		if err != nil {
			t.Fatal(err)
		}
		grants[name] = grant{srv, cli}
	}
	so := &cnet.Options{TLS: &cnet.TLS{
		Select: func(name string) *cnet.Identity { return grants[name].srv },
		Admit: func(name string, fp [32]byte) bool {
			g, ok := grants[name]
			return ok && g.cli.Fingerprint == fp
		},
	}}
	L := listen(t, so)
	for name, g := range grants {
		cl, err := cnet.Dial(ctx, L.Addr().String(), &cnet.Options{TLS: &cnet.TLS{Identity: g.cli, Peer: g.srv.Fingerprint, ServerName: name}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sl, err := L.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sl.ServerName() != name || sl.PeerFingerprint() != g.cli.Fingerprint {
			t.Errorf("accepted %q with %x, want %q with %x", sl.ServerName(), sl.PeerFingerprint(), name, g.cli.Fingerprint)
		}
		sl.Close()
		cl.Close()
	}
	// A client granted for one name cannot open under another, nor under
	// a name the listener does not know.
	a, b := grants["c0001"], grants["c0002"]
	if _, err := cnet.Dial(ctx, L.Addr().String(), &cnet.Options{TLS: &cnet.TLS{Identity: a.cli, Peer: b.srv.Fingerprint, ServerName: "c0002"}}); !errors.Is(err, cnet.ErrAuth) {
		t.Errorf("a client under another connection's name: %v, want ErrAuth", err)
	}
	if _, err := cnet.Dial(ctx, L.Addr().String(), &cnet.Options{TLS: &cnet.TLS{Identity: a.cli, Peer: a.srv.Fingerprint, ServerName: "c9999"}}); err == nil {
		t.Error("a server name the listener does not know: connected")
	}
}

// An identity survives Marshal and ParseIdentity, and a key that is not
// the certificate's is refused.
func TestIdentityMarshal(t *testing.T) {
	a, err := cnet.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := cnet.NewIdentity()
	cert, key, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := cnet.ParseIdentity(cert, key)
	if err != nil || got.Fingerprint != a.Fingerprint {
		t.Fatalf("parsed %v, %v", got, err)
	}
	_, otherKey, _ := b.Marshal()
	if _, err := cnet.ParseIdentity(cert, otherKey); !errors.Is(err, cnet.ErrAuth) {
		t.Errorf("another identity's key: %v, want ErrAuth", err)
	}
	if _, err := cnet.ParseIdentity(cert[:10], key); !errors.Is(err, cnet.ErrAuth) {
		t.Errorf("a truncated certificate: %v, want ErrAuth", err)
	}
}

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
	so = &cnet.Options{TLS: &cnet.TLS{Identity: srv, Admit: func(fp [32]byte) bool {
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
	noLeaks(t)
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
func TestTLSRefusals(t *testing.T) {
	noLeaks(t)
	_, cli, so, co := identities(t)
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
	if _, err := cnet.Dial(ctx, L.Addr().String(), &cnet.Options{TLS: &cnet.TLS{Identity: other, Peer: so.TLS.Identity.Fingerprint}}); !errors.Is(err, cnet.ErrAuth) {
		t.Errorf("a client not admitted: %v, want ErrAuth", err)
	}
	if _, err := cnet.Dial(ctx, L.Addr().String(), &cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: other.Fingerprint}}); !errors.Is(err, cnet.ErrAuth) {
		t.Errorf("a server whose certificate is not pinned: %v, want ErrAuth", err)
	}

	// Whoever learnt the connection's id, without its certificate, cannot
	// resume it: the listener answers as if it did not know the id.
	tc, err := tls.Dial("tcp", L.Addr().String(), &tls.Config{Certificates: []tls.Certificate{other.Cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
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

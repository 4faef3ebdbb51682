package etcd

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/names"
)

// An endpoint that cannot be one is refused at once, naming it and the
// forms the client takes.
func TestEndpointForms(t *testing.T) {
	for _, e := range []string{"10.0.0.1:2379", "http://10.0.0.1:2379", "https://etcd.lab:2379", "[::1]:2379"} {
		if _, _, err := endpointAddr(e); err != nil {
			t.Errorf("%q: %v", e, err)
		}
	}
	for _, e := range []string{"10.0.0.1:2379x", "10.0.0.1", "ftp://10.0.0.1:2379", ":2379", "http://10.0.0.1:0", "10.0.0.1:99999"} {
		_, _, err := endpointAddr(e)
		if err == nil || !strings.Contains(err.Error(), e) || !strings.Contains(err.Error(), "want http://HOST:PORT") && !strings.Contains(err.Error(), "http or https") {
			t.Errorf("%q: %v, want a refusal naming it", e, err)
		}
	}
	_, err := Open(context.Background(), Config{Endpoints: []string{"10.0.0.1:2379x"}, Cluster: "c", Machine: 1})
	if err == nil || !strings.Contains(err.Error(), `"10.0.0.1:2379x"`) {
		t.Fatalf("Open with a malformed endpoint: %v", err)
	}
}

// When etcd does not answer, the error says what each endpoint does when
// dialled: refuses, or speaks something else than its scheme.
func TestUnansweredEndpointsDiagnosed(t *testing.T) {
	// A port that refuses: one that was listened on and closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	// A server that accepts and says nothing: https against it fails its
	// handshake, plain http gets no answer.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			go func() {
				time.Sleep(2 * time.Second)
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
				c.Close()
			}()
		}
	}()
	got := diagnose([]string{refused, "https://" + mute.Addr().String(), "http://" + mute.Addr().String()}, nil)
	for _, want := range []string{refused + ": dial tcp " + refused + ": connect: connection refused", "https://" + mute.Addr().String() + ": TLS:", "http://" + mute.Addr().String() + ": reachable, but etcd did not answer"} {
		if !strings.Contains(got, want) {
			t.Errorf("diagnosis %q lacks %q", got, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = Open(ctx, Config{Endpoints: []string{refused}, Cluster: "c", Machine: 1, DialTimeout: time.Second, OpTimeout: time.Second})
	if !errors.Is(err, names.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Open against a port that refuses: %v, want unavailable, saying the connection was refused", err)
	}
}

package net_test

import (
	"context"
	"errors"
	"fmt"
	stdnet "net"

	"github.com/chanos/chanos/chanos"
	chanosnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interfaces/pingpong"
)

type echo struct{ pingpong.UnimplementedServer }

func (echo) Echo(ctx context.Context, v uint64) (uint64, error) { return v, nil }

// Two sides of a net connection with pinned certificates, on loopback.
// Between machines the monitors make the identities and hand each side
// the other's fingerprint over their own authenticated link, and Connect
// does all of this; a program that sets links up itself does it so.
func Example() {
	ctx := context.Background()
	server, _ := chanosnet.NewIdentity()
	client, _ := chanosnet.NewIdentity()

	tcp, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	L := chanosnet.Listen(tcp, &chanosnet.Options{TLS: &chanosnet.TLS{
		Identity: server,
		// The grant of this one connection: the client's certificate.
		Admit: func(serverName string, fp [32]byte) bool { return fp == client.Fingerprint },
	}})
	defer L.Close()
	go func() {
		link, err := L.Accept(ctx)
		if err != nil {
			return
		}
		s := pingpong.NewConn(chanos.NewConn(link, pingpong.Interface))
		defer s.Close()
		s.Serve(ctx, echo{})
	}()

	link, err := chanosnet.Dial(ctx, L.Addr().String(), &chanosnet.Options{TLS: &chanosnet.TLS{
		Identity: client,
		Peer:     server.Fingerprint, // the server's certificate, pinned
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := pingpong.NewConn(chanos.NewConn(link, pingpong.Interface))
	defer c.Close()
	v, err := c.Echo(ctx, 42)
	fmt.Println(v, err, c.Raw().Interconnect())

	// A client whose certificate the server was not told of is refused.
	stranger, _ := chanosnet.NewIdentity()
	_, err = chanosnet.Dial(ctx, L.Addr().String(), &chanosnet.Options{TLS: &chanosnet.TLS{Identity: stranger, Peer: server.Fingerprint}})
	fmt.Println(errors.Is(err, chanosnet.ErrAuth), err)
	// Output:
	// 42 <nil> net
	// true net: peer not authenticated: the peer does not admit this side's certificate
}

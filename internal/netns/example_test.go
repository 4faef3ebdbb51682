package netns_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"

	"github.com/chanos/chanos/internal/netns"
)

// Three machines: a monitor in machine 1, reached from machine 2 at
// machine 1's address; machine 1 cut off and back. Close removes it all,
// the monitor included.
func ExampleNew() {
	ctx := context.Background()
	c, err := netns.New(ctx, netns.Options{Machines: 3})
	if err != nil {
		log.Fatal(err) // errors.Is(err, netns.ErrUnavailable): not root, or no 'ip netns'
	}
	defer c.Close()
	m1, m2 := c.Machines[0], c.Machines[1]

	if err := m1.Command("chanos", "monitor", "--dir", "/tmp/m1").Start(); err != nil {
		log.Fatal(err)
	}
	conn, err := m2.Dial(ctx, "tcp", netip.AddrPortFrom(m1.Addr, 2379).String())
	if err == nil {
		conn.Close()
	}
	if err := m1.Cut(ctx); err != nil {
		log.Fatal(err)
	}
	if err := m1.Restore(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(m1.NS, m1.Addr)
}

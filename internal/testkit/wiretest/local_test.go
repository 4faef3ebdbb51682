package wiretest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/local"
	"github.com/chanos/chanos/internal/testkit/wiretest/alltypes"
	"github.com/chanos/chanos/wire"
)

// On the local interconnect a message travels as a copy, not a frame, and
// is checked as Encode checks it, inside structs and arrays too: an enum
// out of range in a struct argument is refused as over a ring, and a good
// message arrives.
func TestLocalSendChecksNestedEnums(t *testing.T) {
	x, y := local.Pair()
	c := alltypes.NewConn(chanos.NewConn(x, alltypes.Interface))
	s := alltypes.NewConn(chanos.NewConn(y, alltypes.Interface))
	defer c.Close()
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad := &alltypes.Structs{Ln: alltypes.Line{Colour: 9}}
	var buf wire.Buffer
	if err := bad.Encode(&buf); !errors.Is(err, wire.ErrEnum) {
		t.Fatalf("Encode of an enum out of range = %v, want ErrEnum", err)
	}
	if err := c.Send(ctx, bad); !errors.Is(err, wire.ErrEnum) {
		t.Fatalf("local Send of an enum out of range in a struct = %v, want ErrEnum", err)
	}
	good := &alltypes.Structs{Ln: alltypes.Line{Colour: 1}}
	if err := c.Send(ctx, good); err != nil {
		t.Fatal(err)
	}
	m, err := s.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := m.(*alltypes.Structs); !ok || got.Ln.Colour != 1 {
		t.Fatalf("received %#v", m)
	}
}

package wire_test

import (
	"errors"
	"fmt"

	"github.com/chanos/chanos/wire"
)

// Every rejection names its code, matchable with errors.Is, and where it
// happened.
func ExampleParseFrame() {
	_, _, err := wire.ParseFrame([]byte{24, 0, 0, 0, 1, 0})
	fmt.Println(errors.Is(err, wire.ErrTruncated), errors.Is(err, wire.ErrMalformed))
	fmt.Println(err)

	frame := wire.AppendHeader(nil, wire.Header{Size: wire.HeaderSize, Msg: 1, Flags: wire.FlagCall, CallID: 7})
	h, k, err := wire.ParseFrame(frame)
	fmt.Println(h.Msg, k, h.CallID, err)
	// Output:
	// true true
	// wire: frame of 6 bytes is shorter than the 16-byte header at offset 0
	// 1 call 7 <nil>
}

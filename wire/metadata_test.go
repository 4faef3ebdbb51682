package wire_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/chanos/chanos/wire"
)

// callFrame returns an encoded call of msg 3 with an 8-byte body.
func callFrame() []byte {
	b := wire.AppendHeader(nil, wire.Header{Size: wire.HeaderSize + 8, Msg: 3, Flags: wire.FlagCall, CallID: 9, TimeoutUS: 100})
	return append(b, 1, 2, 3, 4, 5, 6, 7, 8)
}

func TestMetadataRoundTrip(t *testing.T) {
	md := wire.Metadata{"trace-id": "abc", "b": "", "a.b_c-d": "x"}
	plain := callFrame()
	frame, err := wire.AppendMetadata(callFrame(), md)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := wire.AppendMetadata(callFrame(), md)
	if string(again) != string(frame) {
		t.Fatal("the same metadata made two frames")
	}
	var h wire.Header
	if _, err := wire.ParseFrameInto(&h, frame); !errors.Is(err, wire.ErrHeader) {
		t.Fatalf("a decoder takes a call with metadata: %v", err)
	}
	got, gotMD, err := wire.SplitMetadata(frame)
	if err != nil || string(got) != string(plain) || !maps.Equal(gotMD, md) {
		t.Fatalf("SplitMetadata = %x, %v, %v; want %x, %v", got, gotMD, err, plain, md)
	}
	if _, err := wire.AppendMetadata(wire.AppendHeader(nil, wire.Header{Size: 16, Msg: 1}), md); !errors.Is(err, wire.ErrHeader) {
		t.Fatalf("metadata on a message = %v, want ErrHeader", err)
	}
	// A message frame with META set is no valid frame.
	bad := wire.AppendHeader(nil, wire.Header{Size: 16, Msg: 1, Flags: wire.FlagMeta})
	if _, err := wire.ParseFrameInto(&h, bad); !errors.Is(err, wire.ErrHeader) {
		t.Fatalf("META without CALL = %v, want ErrHeader", err)
	}
}

// FuzzSplitMetadata: whatever the trailer holds, SplitMetadata returns a
// well-formed call or an error of the wire's codes, never a panic, and
// what it accepts survives a round trip.
func FuzzSplitMetadata(f *testing.F) {
	good, _ := wire.AppendMetadata(callFrame(), wire.Metadata{"k": "v", "trace-id": "1234"})
	f.Add(good[wire.HeaderSize:])
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 1, 'k', 1, 0, 'v', 5, 0})
	f.Add([]byte{0xff, 0xff})
	f.Add([]byte{1, 'K', 0, 0, 4, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		frame := wire.AppendHeader(nil, wire.Header{Size: uint32(wire.HeaderSize + len(body)), Msg: 3, Flags: wire.FlagCall | wire.FlagMeta, CallID: 1})
		frame = append(frame, body...)
		call, md, err := wire.SplitMetadata(frame)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("error %v matches no wire code", err)
			}
			return
		}
		back, err := wire.AppendMetadata(call, md)
		if err != nil {
			t.Fatalf("accepted metadata %v does not encode: %v", md, err)
		}
		if len(md) == 0 { // an empty trailer: a sender writes none
			if string(back) != string(call) {
				t.Fatalf("empty metadata made a trailer: %x", back)
			}
			return
		}
		_, md2, err := wire.SplitMetadata(back)
		if err != nil || !maps.Equal(md, md2) {
			t.Fatalf("round trip: %v, %v; want %v", md2, err, md)
		}
	})
}

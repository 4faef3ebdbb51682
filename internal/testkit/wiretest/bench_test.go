package wiretest

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/chanos/chanos/internal/testkit/wiretest/pingpong"
	"github.com/chanos/chanos/wire"
)

// BenchmarkPing encodes and decodes the fixed-size ping (two uint32) into a
// reused Buffer and message: the fast path of generated code.
func BenchmarkPing(b *testing.B) {
	var buf wire.Buffer
	in := pingpong.Ping{ClientID: 7, MsgID: 258}
	var out pingpong.Ping
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := in.Encode(&buf); err != nil {
			b.Fatal(err)
		}
		if err := out.Decode(buf.B, nil); err != nil {
			b.Fatal(err)
		}
	}
	if out != in {
		b.Fatalf("decoded %+v, want %+v", out, in)
	}
}

// BenchmarkPingBaseline is the floor BenchmarkPing is measured against: the
// same frame written and checked by hand with encoding/binary, with no
// error reporting.
func BenchmarkPingBaseline(b *testing.B) {
	buf := make([]byte, 0, 64)
	var out pingpong.Ping
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:24]
		binary.LittleEndian.PutUint64(buf, 24|1<<32)
		binary.LittleEndian.PutUint64(buf[8:], 0)
		binary.LittleEndian.PutUint32(buf[16:], 7)
		binary.LittleEndian.PutUint32(buf[20:], 258)
		if binary.LittleEndian.Uint64(buf) != 24|1<<32 || binary.LittleEndian.Uint64(buf[8:]) != 0 {
			b.Fatal("bad header")
		}
		out.ClientID = binary.LittleEndian.Uint32(buf[16:])
		out.MsgID = binary.LittleEndian.Uint32(buf[20:])
	}
	if out.MsgID != 258 {
		b.Fatal(out)
	}
}

// BenchmarkText encodes and decodes a message holding a 100-byte string.
// Decoding allocates the string.
func BenchmarkText(b *testing.B) {
	var buf wire.Buffer
	in := pingpong.Text{Seq: 1, Body: strings.Repeat("x", 100)}
	var out pingpong.Text
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := in.Encode(&buf); err != nil {
			b.Fatal(err)
		}
		if err := out.Decode(buf.B, nil); err != nil {
			b.Fatal(err)
		}
	}
	if out != in {
		b.Fatalf("decoded %+v, want %+v", out, in)
	}
}

// BenchmarkDecodeAny decodes the ping through the package-level Decode,
// which allocates the message.
func BenchmarkDecodeAny(b *testing.B) {
	var buf wire.Buffer
	if err := (&pingpong.Ping{ClientID: 7, MsgID: 258}).Encode(&buf); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pingpong.Decode(buf.B, nil); err != nil {
			b.Fatal(err)
		}
	}
}

package wiretest

import (
	"encoding/hex"
	"testing"

	"github.com/chanos/chanos/wire"
)

// FuzzDecode feeds the generated decoders of alltypes (through the
// package-level Decode, which reaches every typed decoder) arbitrary frames
// with 0 to 7 capabilities. Decoding must not panic, must fail only with a
// wire code, and what decodes must encode back to the same frame. The seeds
// are every frame of testdata/wire/alltypes.json; testdata/fuzz/FuzzDecode
// holds them too, as committed corpus.
func FuzzDecode(f *testing.F) {
	s := loadSuite(f, "alltypes.json")
	for _, list := range [][]vector{s.file.Vectors, s.file.Malformed, s.file.DecodeOnly} {
		for _, v := range list {
			frame, err := hex.DecodeString(v.Hex)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(frame, uint8(v.NCaps))
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte, ncaps uint8) {
		checkDecode(t, frame, placeholders(int(ncaps%8)))
	})
}

// FuzzErrorReply checks the decoders of the frames the connection layer
// handles itself: error replies and cancels.
func FuzzErrorReply(f *testing.F) {
	var buf wire.Buffer
	if err := wire.AppendErrorReply(&buf, 3, wire.Status{Code: 7, Detail: "no such key"}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.B)
	buf.Reset()
	wire.AppendCancel(&buf, 3, 9)
	f.Add(buf.B)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if _, st, err := wire.ParseErrorReply(frame); err == nil {
			var out wire.Buffer
			if err := wire.AppendErrorReply(&out, wire.Uint16(frame[4:]), st); err != nil {
				t.Fatalf("ParseErrorReply(%x) = %+v, which does not encode: %v", frame, st, err)
			}
			want := append([]byte(nil), frame...)
			wire.SetCallID(want, 0)
			if string(out.B) != string(want) {
				t.Fatalf("ParseErrorReply(%x) = %+v, which encodes as %x", frame, st, out.B)
			}
		} else if wire.Code(err) == "" {
			t.Fatalf("ParseErrorReply(%x): %v is no wire code", frame, err)
		}
		if _, err := wire.ParseCancel(frame); err != nil && wire.Code(err) == "" {
			t.Fatalf("ParseCancel(%x): %v is no wire code", frame, err)
		}
	})
}

package wire_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"slices"
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
// what it accepts encodes back to the same frame.
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
		// Keys sorted, each once: a trailer accepted is the one its
		// metadata encodes to.
		if !bytes.Equal(back, frame) {
			t.Fatalf("metadata %v re-encodes to %x, not %x", md, back, frame)
		}
	})
}

// metadataFile is testdata/wire/metadata.json (testdata/wire/README.md):
// trailers written by an encoder of docs/wire.md alone, which C's
// libchanos passes too (c/tests/test_wire.c).
type metadataFile struct {
	Call       string     `json:"call"`
	Trailers   []mdVector `json:"trailers"`
	DecodeOnly []mdVector `json:"decode_only"`
	Malformed  []mdVector `json:"malformed"`
	Unsendable []mdVector `json:"unsendable"`
	Replies    []mdVector `json:"replies"`
}

type mdVector struct {
	Name    string      `json:"name"`
	Entries [][2]string `json:"entries"`
	Hex     string      `json:"hex"`
	Error   string      `json:"error"`
	Base    string      `json:"base"` // replies: the frame without its trailer
}

func loadMetadataVectors(t *testing.T) (metadataFile, []byte) {
	t.Helper()
	data, err := os.ReadFile("../testdata/wire/metadata.json")
	if err != nil {
		t.Fatal(err)
	}
	var f metadataFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	call, err := hex.DecodeString(f.Call)
	if err != nil {
		t.Fatal(err)
	}
	return f, call
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mdOf is a vector's entries as Metadata, and false if a key repeats,
// which Metadata cannot hold.
func mdOf(entries [][2]string) (wire.Metadata, bool) {
	md := wire.Metadata{}
	for _, e := range entries {
		if _, dup := md[e[0]]; dup {
			return nil, false
		}
		md[e[0]] = e[1]
	}
	return md, true
}

var codes = map[string]error{
	"truncated": wire.ErrTruncated, "size": wire.ErrSize, "trailing": wire.ErrTrailing,
	"unknown_message": wire.ErrUnknownMessage, "header": wire.ErrHeader, "bound": wire.ErrBound,
	"enum": wire.ErrEnum, "bool": wire.ErrBool, "cap": wire.ErrCap, "nul": wire.ErrNUL,
}

func TestMetadataVectors(t *testing.T) {
	f, call := loadMetadataVectors(t)
	for _, v := range append(f.Trailers, f.DecodeOnly...) {
		frame := unhex(t, v.Hex)
		md, _ := mdOf(v.Entries)
		got, gotMD, err := wire.SplitMetadata(frame)
		if err != nil || !bytes.Equal(got, call) || !maps.Equal(gotMD, md) {
			t.Errorf("%s: SplitMetadata = %x, %v, %v; want %x, %v", v.Name, got, gotMD, err, call, md)
		}
	}
	for _, v := range f.Trailers {
		md, _ := mdOf(v.Entries)
		if got, err := wire.AppendMetadata(slices.Clone(call), md); err != nil || hex.EncodeToString(got) != v.Hex {
			t.Errorf("%s: AppendMetadata = %x, %v; want %s", v.Name, got, err, v.Hex)
		}
	}
	for _, v := range f.Malformed {
		want := codes[v.Error]
		if _, _, err := wire.SplitMetadata(unhex(t, v.Hex)); want == nil || !errors.Is(err, want) {
			t.Errorf("%s: SplitMetadata = %v, want %s", v.Name, err, v.Error)
		}
	}
	if len(f.Replies) == 0 {
		t.Error("no reply vectors")
	}
	for _, v := range f.Replies {
		md, _ := mdOf(v.Entries)
		base := unhex(t, v.Base)
		got, gotMD, err := wire.SplitMetadata(unhex(t, v.Hex))
		if err != nil || !bytes.Equal(got, base) || !maps.Equal(gotMD, md) {
			t.Errorf("reply %s: SplitMetadata = %x, %v, %v; want %x, %v", v.Name, got, gotMD, err, base, md)
		}
		if got, err := wire.AppendMetadata(slices.Clone(base), md); err != nil || hex.EncodeToString(got) != v.Hex {
			t.Errorf("reply %s: AppendMetadata = %x, %v; want %s", v.Name, got, err, v.Hex)
		}
	}
	for _, v := range f.Unsendable {
		md, ok := mdOf(v.Entries)
		if !ok {
			continue // a repeated key: Metadata cannot hold one
		}
		want := codes[v.Error]
		if _, err := wire.AppendMetadata(slices.Clone(call), md); want == nil || !errors.Is(err, want) {
			t.Errorf("%s: AppendMetadata = %v, want %s", v.Name, err, v.Error)
		}
	}
}

package idl

import "testing"

// The largest frames and capability counts, which the checker, the Go
// back end's MaxFrameSize and the C back end's buffers all take from here.
func TestMaxWireSize(t *testing.T) {
	iface, err := compile(t, "sizes.if", `interface sizes {
		typedef struct { uint64 seq; uint32 id; cap fd; } entry;
		typedef entry pair[2];
		message one(entry e);
		message many(pair p, uint8 data[n, 10]);
		rpc get(in String key[8], out entry e);
	};`)
	if err != nil {
		t.Fatal(err)
	}
	entry := 8 + 4 + 4 // seq, id, fd's index
	for _, c := range []struct {
		msg        string
		out        bool
		size, caps uint64
	}{
		{"one", false, uint64(HeaderSize + entry), 1},
		{"many", false, uint64(HeaderSize + 2*entry + 4 + 10), 2},
		{"get", false, uint64(HeaderSize + 4 + 8), 0},
		{"get", true, uint64(HeaderSize + entry), 1},
	} {
		var m *Message
		for _, x := range iface.Messages {
			if x.Name == c.msg {
				m = x
			}
		}
		args := m.In()
		if c.out {
			args = m.Out()
		}
		if size, caps := FrameMax(args); size != c.size || caps != c.caps {
			t.Errorf("%s (out %v): FrameMax = %d, %d; want %d, %d", c.msg, c.out, size, caps, c.size, c.caps)
		}
	}
	if got := iface.MaxFrameSize(); got != StatusFrameSize {
		t.Errorf("MaxFrameSize = %d, want the error reply's %d", got, StatusFrameSize)
	}
	// Absurd bounds saturate rather than wrap.
	if satMul(1<<40, 1<<40) != satMax || satAdd(satMax, 1) != satMax {
		t.Error("sizes do not saturate")
	}
}

package peers

import (
	"encoding/binary"
	"fmt"
)

// The byte-stream peers (uds, tcp, pipe) and shmipc-go carry frames of an
// 8-byte header followed by the payload:
//
//	[0:4] payload length, little endian
//	[4]   op
//	[5:8] zero
//
// The echo server answers opEcho with the same frame and opCall with an
// opCall frame carrying the request's payload (call id and argument); it
// counts opSink frames without answering, and answers opAck with the
// number of sink frames and payload bytes seen since the previous opAck.
// Over shmipc-go, which has no flow control of its own, the server also
// sends opCredit frames (same payload as opAck) for sink frames consumed.
const (
	hdrLen = 8

	opEcho   byte = 1
	opSink   byte = 2
	opAck    byte = 3
	opCall   byte = 4
	opCredit byte = 5

	// maxPayload bounds a frame's payload; larger lengths are a protocol
	// error rather than an allocation.
	maxPayload = 16 << 20

	// ackLen is the payload length of an opAck reply.
	ackLen = 16
	// callIDLen is the call id that opens an opCall payload.
	callIDLen = 8
)

func putHdr(b []byte, op byte, n int) {
	binary.LittleEndian.PutUint32(b[0:4], uint32(n))
	b[4], b[5], b[6], b[7] = op, 0, 0, 0
}

func parseHdr(b []byte) (op byte, n int, err error) {
	if len(b) < hdrLen {
		return 0, 0, fmt.Errorf("frame header: %d bytes, want %d", len(b), hdrLen)
	}
	op = b[4]
	n64 := binary.LittleEndian.Uint32(b[0:4])
	if op < opEcho || op > opCredit {
		return 0, 0, fmt.Errorf("frame header: unknown op %d", op)
	}
	if b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return 0, 0, fmt.Errorf("frame header: reserved bytes not zero")
	}
	if n64 > maxPayload {
		return 0, 0, fmt.Errorf("frame header: length %d exceeds %d", n64, maxPayload)
	}
	return op, int(n64), nil
}

// putAck and parseAck encode an opAck reply's payload.
func putAck(b []byte, msgs, bytes uint64) {
	binary.LittleEndian.PutUint64(b[0:8], msgs)
	binary.LittleEndian.PutUint64(b[8:16], bytes)
}

func parseAck(b []byte) (Ack, error) {
	if len(b) != ackLen {
		return Ack{}, fmt.Errorf("ack: %d bytes, want %d", len(b), ackLen)
	}
	return Ack{Msgs: binary.LittleEndian.Uint64(b[0:8]), Bytes: binary.LittleEndian.Uint64(b[8:16])}, nil
}

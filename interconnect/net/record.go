package net

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
)

// The record types of the link protocol (docs/net.md).
const (
	recData   = 1 // a chanos frame, sequenced
	recAck    = 2 // a cumulative acknowledgement alone; also the keepalive
	recClose  = 3 // the sender's orderly end, sequenced after its last frame
	recHello  = 4 // the first record of each TCP connection, both ways
	recReject = 5 // the acceptor refuses a hello; the TCP connection closes
)

// recHeaderSize is the size of a record's header: type, flags, reserved,
// length, sequence number, acknowledgement.
const recHeaderSize = 24

// helloSize is the size of a hello's payload.
const helloSize = 36

// protoVersion is the version a hello announces.
const protoVersion = 1

// helloResume, in a hello's flags, asks to resume the connection its id
// names rather than to open a new one.
const helloResume = 1

// The codes of a reject's payload (a u32).
const (
	rejectUnknown  = 1 // resume of a connection the acceptor does not hold
	rejectBadHello = 2 // a hello that is malformed or of another version
	rejectBusy     = 3 // too many connections wait to be accepted
	rejectAuth     = 4 // the client's certificate is not admitted
	rejectMode     = 5 // the client asked for the other mode (TLS.AuthOnly)
)

var helloMagic = [4]byte{'c', 'h', 'n', 't'}

// errRejectedUnknown: the acceptor no longer holds the connection.
var errRejectedUnknown = errors.New("net: the peer does not know this connection")

type recHeader struct {
	typ      uint8
	flags    uint8
	reserved uint16
	length   uint32
	seq      uint64
	ack      uint64
}

func putHeader(b []byte, typ uint8, length int, seq, ack uint64) {
	b[0], b[1], b[2], b[3] = typ, 0, 0, 0
	binary.LittleEndian.PutUint32(b[4:], uint32(length))
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], ack)
}

func parseHeader(b []byte) recHeader {
	return recHeader{
		typ:      b[0],
		flags:    b[1],
		reserved: binary.LittleEndian.Uint16(b[2:]),
		length:   binary.LittleEndian.Uint32(b[4:]),
		seq:      binary.LittleEndian.Uint64(b[8:]),
		ack:      binary.LittleEndian.Uint64(b[16:]),
	}
}

// hello is a hello record: header and payload.
type hello struct {
	resume    bool
	id        [16]byte
	maxFrame  uint32
	winFrames uint32
	winBytes  uint32
	received  uint64 // the header's ack: the last sequence number received
}

func (h *hello) encode() []byte {
	b := make([]byte, recHeaderSize+helloSize)
	putHeader(b, recHello, helloSize, 0, h.received)
	p := b[recHeaderSize:]
	copy(p, helloMagic[:])
	binary.LittleEndian.PutUint16(p[4:], protoVersion)
	if h.resume {
		binary.LittleEndian.PutUint16(p[6:], helloResume)
	}
	copy(p[8:24], h.id[:])
	binary.LittleEndian.PutUint32(p[24:], h.maxFrame)
	binary.LittleEndian.PutUint32(p[28:], h.winFrames)
	binary.LittleEndian.PutUint32(p[32:], h.winBytes)
	return b
}

// parseHello checks a hello's header and payload.
func parseHello(rh recHeader, p []byte) (hello, error) {
	var h hello
	if rh.typ != recHello || rh.length != helloSize || len(p) != helloSize || rh.seq != 0 {
		return h, fmt.Errorf("net: expected a hello of %d bytes, got a record of type %d and %d bytes", helloSize, rh.typ, rh.length)
	}
	if rh.flags != 0 || rh.reserved != 0 {
		return h, fmt.Errorf("net: a hello whose record header has flags %#x and reserved bytes %#x", rh.flags, rh.reserved)
	}
	if [4]byte(p[:4]) != helloMagic {
		return h, errors.New("net: a hello without the protocol's magic")
	}
	if v := binary.LittleEndian.Uint16(p[4:]); v != protoVersion {
		return h, fmt.Errorf("net: a hello of version %d (this side speaks %d)", v, protoVersion)
	}
	fl := binary.LittleEndian.Uint16(p[6:])
	if fl&^helloResume != 0 {
		return h, fmt.Errorf("net: a hello with unknown flags %#x", fl)
	}
	h.resume = fl&helloResume != 0
	copy(h.id[:], p[8:24])
	h.maxFrame = binary.LittleEndian.Uint32(p[24:])
	h.winFrames = binary.LittleEndian.Uint32(p[28:])
	h.winBytes = binary.LittleEndian.Uint32(p[32:])
	h.received = rh.ack
	if h.maxFrame < minFrame || h.winFrames == 0 || h.winBytes < h.maxFrame {
		return h, fmt.Errorf("net: a hello with unusable limits (max frame %d, window %d frames, %d bytes)", h.maxFrame, h.winFrames, h.winBytes)
	}
	return h, nil
}

func rejectRecord(code uint32) []byte {
	b := make([]byte, recHeaderSize+4)
	putHeader(b, recReject, 4, 0, 0)
	binary.LittleEndian.PutUint32(b[recHeaderSize:], code)
	return b
}

// macKeySize and tagSize are the authenticated-only mode's AES-256 key
// and GMAC tag sizes.
const (
	macKeySize = 32
	tagSize    = 16
)

// errBadTag: a clear record failed its authentication. The TCP
// connection is taken for broken, not the link: whoever can inject bytes
// can break a TCP connection anyway, and the resume that follows
// retransmits what the tampered record carried.
var errBadTag = errors.New("net: a record failed authentication")

// recordMAC authenticates the records of one direction of one TCP
// connection in the authenticated-only mode: AES-256-GMAC (AES-GCM with
// an empty plaintext, the record as additional data; NIST SP 800-38D)
// under that direction's exported key, with the record's index on the
// connection as the nonce. The index makes dropping, replaying or
// reordering a record fail its tag; the key, fresh for each TCP
// connection and each direction, does the same for records spliced from
// another connection or reflected back.
type recordMAC struct {
	gcm   cipher.AEAD
	count uint64
	nonce [12]byte
	buf   []byte // a record's header and payload together, when too large for the buffered writer and not kept with room for them
}

func newRecordMAC(key []byte) (*recordMAC, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("net: record key: %w", err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		return nil, fmt.Errorf("net: record key: %w", err)
	}
	return &recordMAC{gcm: g}, nil
}

// next returns the nonce of the next record: four zero bytes, then the
// record's index on the connection (from 0), little-endian.
func (m *recordMAC) next() []byte {
	binary.LittleEndian.PutUint64(m.nonce[4:], m.count)
	m.count++
	return m.nonce[:]
}

// seal appends to rec (a record's header and payload) its tag.
func (m *recordMAC) seal(rec []byte) []byte {
	return m.gcm.Seal(rec, m.next(), nil, rec)
}

// open checks tag against rec (a record's header and payload).
func (m *recordMAC) open(rec, tag []byte) bool {
	_, err := m.gcm.Open(nil, m.next(), tag, rec)
	return err == nil
}

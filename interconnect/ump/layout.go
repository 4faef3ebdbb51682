package ump

import (
	"encoding/binary"
	"fmt"
)

// The shared-memory layout, documented byte for byte in docs/ump.md and
// mirrored in c/src/ump.c. Every multi-byte field is little-endian.
const (
	// Magic is the first word of a ring pair's memory: "CHANOSUM".
	magic uint64 = 0x4d55534f4e414843
	// Version is the layout version written in the header and the handshake.
	Version = 3

	// SlotSize is the size of one ring slot: one cache line.
	SlotSize = 64
	// SlotPayload is the number of message bytes a slot carries; the last 8
	// bytes of a slot are its control word.
	SlotPayload = 56
	ctrlOff     = 56

	headerSize = 4096 // the header page; the slots of ring 0 follow it
	blockSize  = 128  // each shared control word sits alone in a 128-byte block

	// Offsets in the header page.
	offMagic    = 0
	offVersion  = 8
	offSlotSize = 12
	offSlots    = 16
	offMaxMsg   = 20
	offHdrSize  = 24
	offBulk     = 28
	offTotal    = 32
	// headerFields is how far the fields above reach; the rest of the
	// header page starts zeroed, as a fresh memfd's bytes do.
	headerFields = offTotal + 8

	// Side s's close word: 1<<63 | the position of ring s at close.
	offClosed0 = 1 * blockSize
	// Ring r's control words start at offRing0 + r*ringCtlSize.
	offRing0    = 4 * blockSize
	ringCtlSize = 4 * blockSize
	offProdWait = 0 * blockSize // producer: "I sleep until there is space"
	offHead     = 1 * blockSize // consumer: position consumed so far
	offBulkHead = offHead + 8   // consumer: bulk bytes consumed so far
	offConsWait = 2 * blockSize // consumer: "I sleep until there is data"

	// Control word: bits 0..31 the sequence number, bits 32..63 the info.
	infoFirst  uint32 = 1 << 31 // first slot of a message; low bits: its length
	infoCaps   uint32 = 1 << 30 // reserved: descriptors travel on the socket
	infoBulk   uint32 = 1 << 29 // the message's bytes are in the bulk region
	infoLenMax uint32 = 1<<29 - 1
	closedBit  uint64 = 1 << 63

	// MaxMessageLimit is the largest maximum message size a ring pair may
	// declare.
	MaxMessageLimit = 1<<29 - 1

	// BulkMin is the length above which a message travels through the
	// bulk region of a ring that has one: a copy into a contiguous region
	// and out again beats a copy per 56-byte slot. Shorter messages take
	// at most 8 slots.
	BulkMin = 8 * SlotPayload
	// MaxBulkSize is the largest bulk region per direction.
	MaxBulkSize = 1 << 30
	minBulkSize = 4096
	// MaxRingSlots is the largest number of slots per direction.
	MaxRingSlots = 1 << 24
	minRingSlots = 2

	// DefaultMaxMessageSize is the maximum message size when Options leaves
	// it zero.
	DefaultMaxMessageSize = 64 << 10
)

// config is the static part of the header, copied out and validated once
// by each side; neither side reads it from shared memory again.
type config struct {
	slots  uint32 // slots per direction, a power of two
	maxMsg uint32 // maximum message length in bytes
	bulk   uint32 // bulk region bytes per direction: 0 (none) or a power of two >= maxMsg
}

// slotsFor returns how many slots a message of n bytes occupies.
func slotsFor(n int) int {
	if n <= SlotPayload {
		return 1
	}
	return (n + SlotPayload - 1) / SlotPayload
}

// totalSize returns the size of the shared memory of a ring pair.
func (c config) totalSize() int {
	return headerSize + 2*int(c.slots)*SlotSize + 2*int(c.bulk)
}

// bulkOffset returns the offset of ring r's bulk region.
func (c config) bulkOffset(r int) int {
	return headerSize + 2*int(c.slots)*SlotSize + r*int(c.bulk)
}

// usesBulk reports whether a message of n bytes travels in the bulk
// region: the rule of docs/ump.md, which both sides' producers follow.
func (c config) usesBulk(n int) bool {
	return c.bulk != 0 && n > BulkMin
}

// ringOffset returns the offset of ring r's first slot.
func (c config) ringOffset(r int) int {
	return headerSize + r*int(c.slots)*SlotSize
}

// defaultSlots returns the number of slots per direction chosen for a
// maximum message size: room for two maximum messages, at least 1024
// slots; with a bulk region, where messages longer than BulkMin take one
// slot, 4096: room for thousands of small messages in flight.
func defaultSlots(maxMsg int, bulk bool) int {
	want := 2 * slotsFor(maxMsg)
	if bulk {
		want = 4096
	}
	n := 1024
	for n < want && n < MaxRingSlots {
		n <<= 1
	}
	return n
}

// defaultBulk returns the bulk region size chosen for a maximum message
// size: room for two maximum messages and at least defaultBulkMin; none if
// no message exceeds BulkMin. The pages are touched only as bulk messages
// pass.
func defaultBulk(maxMsg int) int {
	if maxMsg <= BulkMin {
		return 0
	}
	n := minBulkSize
	for n < max(2*maxMsg, defaultBulkMin) && n < MaxBulkSize {
		n <<= 1
	}
	return n
}

// defaultBulkMin is the least default bulk region: room for the sender to
// run well ahead while the receiver copies out. With room for only two
// 64 KiB messages, a stream stalled whenever either side was descheduled.
// With 1 MiB, a stream of 64 KiB messages moved 13-14 GB/s on the team's
// machine (1 MiB of L2 cache per core), with 4 MiB 30-36 GB/s: the
// receiver then reads what the sender wrote long enough ago to have left
// the sender's core's cache for the shared one, rather than fetching each
// line from the other core (docs/ump.md, "Bulk region").
const defaultBulkMin = 4 << 20

// check reports what is wrong with a configuration, from Options or from
// a peer's header: every message up to the maximum must fit.
func (c config) check() error {
	switch {
	case c.maxMsg == 0 || c.maxMsg > MaxMessageLimit:
		return fmt.Errorf("maximum message size %d out of range [1, %d]", c.maxMsg, MaxMessageLimit)
	case c.slots < minRingSlots || c.slots > MaxRingSlots || c.slots&(c.slots-1) != 0:
		return fmt.Errorf("ring slots %d must be a power of two in [%d, %d]", c.slots, minRingSlots, MaxRingSlots)
	case c.bulk != 0 && (c.bulk < minBulkSize || c.bulk > MaxBulkSize || c.bulk&(c.bulk-1) != 0):
		return fmt.Errorf("bulk region of %d bytes must be 0 or a power of two in [%d, %d]", c.bulk, minBulkSize, MaxBulkSize)
	case c.bulk != 0 && c.bulk < c.maxMsg:
		return fmt.Errorf("bulk region of %d bytes cannot hold a %d-byte message", c.bulk, c.maxMsg)
	}
	// The longest message that takes slots.
	longest := int(c.maxMsg)
	if c.bulk != 0 {
		longest = min(longest, BulkMin)
	}
	if slotsFor(longest) > int(c.slots) {
		return fmt.Errorf("%d ring slots cannot hold a %d-byte message (%d slots)", c.slots, longest, slotsFor(longest))
	}
	return nil
}

// newConfig checks the options and derives the ring pair's configuration.
func newConfig(o *Options) (config, error) {
	maxMsg := o.maxMessageSize()
	if maxMsg <= 0 || maxMsg > MaxMessageLimit {
		return config{}, fmt.Errorf("ump: maximum message size %d out of range [1, %d]", maxMsg, MaxMessageLimit)
	}
	slots, bulk := 0, 0
	if o != nil {
		slots, bulk = o.RingSlots, o.BulkSize
	}
	switch {
	case bulk == 0:
		bulk = defaultBulk(maxMsg)
	case bulk < 0:
		bulk = 0
	case bulk > MaxBulkSize:
		return config{}, fmt.Errorf("ump: bulk region of %d bytes exceeds %d", bulk, MaxBulkSize)
	}
	if slots == 0 {
		slots = defaultSlots(maxMsg, bulk != 0)
	}
	if slots > MaxRingSlots {
		return config{}, fmt.Errorf("ump: ring slots %d must be a power of two in [%d, %d]", slots, minRingSlots, MaxRingSlots)
	}
	c := config{slots: uint32(slots), maxMsg: uint32(maxMsg), bulk: uint32(bulk)}
	if err := c.check(); err != nil {
		return config{}, fmt.Errorf("ump: %w", err)
	}
	return c, nil
}

// writeHeader writes the static header into mem, a fresh ring pair.
func (c config) writeHeader(mem []byte) {
	le := binary.LittleEndian
	le.PutUint64(mem[offMagic:], magic)
	le.PutUint32(mem[offVersion:], Version)
	le.PutUint32(mem[offSlotSize:], SlotSize)
	le.PutUint32(mem[offSlots:], c.slots)
	le.PutUint32(mem[offMaxMsg:], c.maxMsg)
	le.PutUint32(mem[offHdrSize:], headerSize)
	le.PutUint32(mem[offBulk:], c.bulk)
	le.PutUint64(mem[offTotal:], uint64(c.totalSize()))
}

// readHeader copies the static header out of mem and validates it against
// the size of the memory the reader actually has.
func readHeader(mem []byte, size int) (config, error) {
	if len(mem) < headerSize || size < headerSize {
		return config{}, fmt.Errorf("%w: shared memory of %d bytes is smaller than the header", ErrProtocol, size)
	}
	var h [64]byte
	copy(h[:], mem[:64]) // copy first: the peer may change it under us
	le := binary.LittleEndian
	if m := le.Uint64(h[offMagic:]); m != magic {
		return config{}, fmt.Errorf("%w: bad magic %#x in shared memory", ErrProtocol, m)
	}
	if v := le.Uint32(h[offVersion:]); v != Version {
		return config{}, fmt.Errorf("%w: ring version %d, want %d", ErrProtocol, v, Version)
	}
	if s := le.Uint32(h[offSlotSize:]); s != SlotSize {
		return config{}, fmt.Errorf("%w: slot size %d, want %d", ErrProtocol, s, SlotSize)
	}
	if hs := le.Uint32(h[offHdrSize:]); hs != headerSize {
		return config{}, fmt.Errorf("%w: header size %d, want %d", ErrProtocol, hs, headerSize)
	}
	c := config{slots: le.Uint32(h[offSlots:]), maxMsg: le.Uint32(h[offMaxMsg:]), bulk: le.Uint32(h[offBulk:])}
	if err := c.check(); err != nil {
		return config{}, fmt.Errorf("%w: header: %v", ErrProtocol, err)
	}
	if t := le.Uint64(h[offTotal:]); t != uint64(c.totalSize()) || size < c.totalSize() {
		return config{}, fmt.Errorf("%w: shared memory is %d bytes, header says %d, layout needs %d", ErrProtocol, size, t, c.totalSize())
	}
	return c, nil
}

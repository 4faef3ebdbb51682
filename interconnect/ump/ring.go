package ump

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// word returns a pointer to the 8-byte-aligned little-endian word at off.
func word(mem []byte, off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&mem[off]))
}

// producer is the writing end of one ring. It is used under Conn.smu.
type producer struct {
	slots []byte // the ring's slots, in shared memory
	n     uint64 // slot count, a power of two
	mask  uint64
	tail  uint64 // next position to write
	head  uint64 // the consumer's position, as last read and validated

	headp     *uint64 // consumer-written: its position
	waitp     *uint64 // ours: we sleep waiting for space
	peerWaitp *uint64 // consumer-written: it sleeps waiting for data
	epoch     uint64  // number of our last sleep announcement
	signaled  uint64  // the consumer's announcement we last signalled

	bulk   []byte  // the bulk region, in shared memory; nil if none
	bmask  uint64  // len(bulk) - 1
	btail  uint64  // bulk bytes written so far
	bhead  uint64  // bulk bytes the consumer has copied out, as last read and validated
	bheadp *uint64 // consumer-written: its bulk position

	joined []byte // a message sent in parts, joined for the slots
}

// free reports whether need slots, and nbulk bytes of the bulk region, are
// free according to the cached positions.
func (t *producer) free(need, nbulk uint64) bool {
	return t.tail-t.head+need <= t.n && t.btail-t.bhead+nbulk <= uint64(len(t.bulk))
}

// refresh re-reads the consumer's position. A position that moves
// backwards or past what was written is a protocol violation.
func (t *producer) refresh() error {
	h := atomic.LoadUint64(t.headp)
	if h < t.head || h > t.tail {
		return protoErr(fmt.Sprintf("consumer position %d outside [%d, %d]", h, t.head, t.tail))
	}
	t.head = h
	if t.bulk != nil {
		b := atomic.LoadUint64(t.bheadp)
		if b < t.bhead || b > t.btail {
			return protoErr(fmt.Sprintf("consumer bulk position %d outside [%d, %d]", b, t.bhead, t.btail))
		}
		t.bhead = b
	}
	return nil
}

// copyCached is copy in pieces below 1 MiB: Go's memmove switches to
// non-temporal stores at 1 MiB on amd64, which keep the data out of the
// cache, and the peer's core then reads it from memory rather than from
// the shared cache (a 1 MiB stream ran at about 40% of C's speed).
func copyCached(dst, src []byte) int {
	const piece = 512 << 10
	n := 0
	for len(src) > piece && len(dst) > piece {
		k := copy(dst[:piece], src[:piece])
		n, dst, src = n+k, dst[k:], src[k:]
	}
	return n + copy(dst, src)
}

// copy8 copies 8 bytes as one word. An 8-byte message is the commonest
// small one (a counter, a pointer's worth, the benchmarks' pings), and
// for it a call of runtime.memmove is a good part of the copy; on the
// writing side it also stands between the payload and the sequence word,
// time in which the polling reader can take the slot's cache line away.
func copy8(dst, src []byte) {
	binary.LittleEndian.PutUint64(dst[:8], binary.LittleEndian.Uint64(src[:8]))
}

// writeBulk copies the message head+body+tail into the bulk region at
// btail, which must have room for it, and writes its descriptor, one slot
// holding the bulk position, after it.
func (t *producer) writeBulk(head, body, tail []byte) {
	n := len(head) + len(body) + len(tail)
	at := t.btail & t.bmask
	for _, part := range [3][]byte{head, body, tail} {
		k := copyCached(t.bulk[at:], part)
		copyCached(t.bulk, part[k:]) // the part that wraps around
		at = (at + uint64(len(part))) & t.bmask
	}
	p := t.tail
	off := int(p&t.mask) * SlotSize
	binary.LittleEndian.PutUint64(t.slots[off:], t.btail)
	// Sequentially consistent: orders the bytes above before the
	// descriptor, and the descriptor before the caller's load of the
	// consumer's wait word.
	atomic.StoreUint64(word(t.slots, off+ctrlOff), uint64(uint32(p+1))|uint64(infoFirst|infoBulk|uint32(n))<<32)
	t.btail += uint64(n)
	t.tail = p + 1
}

// write copies msg into the ring at tail, which must have room for it. The
// sequence word of every slot is written after its payload; the last one
// with a sequentially consistent store, so that the caller's following load
// of the consumer's wait flag cannot be reordered before it.
func (t *producer) write(msg []byte) {
	n := len(msg)
	if n <= SlotPayload {
		t.writeSlot(msg)
		return
	}
	p := t.tail
	info := infoFirst | uint32(n)
	for k := 0; ; k++ {
		slot := t.slot(p)
		lo := k * SlotPayload
		hi := min(lo+SlotPayload, n)
		if dst := unsafe.Slice((*byte)(slot), SlotPayload); hi-lo == 8 { // see copy8
			copy8(dst, msg[lo:hi])
		} else {
			copy(dst, msg[lo:hi])
		}
		w := uint64(uint32(p+1)) | uint64(info)<<32
		ctrl := (*uint64)(unsafe.Add(slot, ctrlOff))
		p++
		if hi >= n {
			atomic.StoreUint64(ctrl, w)
			break
		}
		storeRelease(ctrl, w)
		info = uint32(k + 1)
	}
	t.tail = p
}

// writeSlot is write for a message of at most SlotPayload bytes, the
// commonest kind, in one slot.
func (t *producer) writeSlot(msg []byte) {
	p := t.tail
	slot := t.slot(p)
	if len(msg) == 8 { // a word: no call of memmove (see copy8)
		copy8(unsafe.Slice((*byte)(slot), 8), msg)
	} else {
		copy(unsafe.Slice((*byte)(slot), SlotPayload), msg)
	}
	w := uint64(uint32(p+1)) | uint64(infoFirst|uint32(len(msg)))<<32
	atomic.StoreUint64((*uint64)(unsafe.Add(slot, ctrlOff)), w)
	t.tail = p + 1
}

// slot returns the address of the slot at pos: see consumer.slot.
func (t *producer) slot(pos uint64) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(unsafe.SliceData(t.slots)), (pos&t.mask)*SlotSize)
}

// consumer is the reading end of one ring. It is used under Conn.rmu. Its
// poll method is the ring reader proper: it trusts nothing in shared
// memory, copies every word out before looking at it and bounds every
// length and index.
type consumer struct {
	slots  []byte
	n      uint64
	mask   uint64
	maxMsg uint32
	pos    uint64 // next position to read
	pub    uint64 // position last published to headp
	batch  uint64 // publish at least every batch slots

	headp     *uint64 // ours: our position, for the producer's flow control
	waitp     *uint64 // ours: we sleep waiting for data
	peerWaitp *uint64 // producer-written: it sleeps waiting for space
	epoch     uint64  // number of our last sleep announcement
	signaled  uint64  // the producer's announcement we last signalled

	bulk   []byte  // the bulk region, in shared memory; nil if none
	bmask  uint64  // len(bulk) - 1
	bpos   uint64  // bulk bytes copied out so far
	bpub   uint64  // bpos as last published to bheadp
	bbatch uint64  // publish at least every bbatch bulk bytes
	bheadp *uint64 // ours: our bulk position

	buf    []byte // the message being reassembled / last returned
	msgLen int    // length of the message in progress, -1 if none
	got    int    // bytes of it copied so far
	frag   uint32 // index of the next fragment
}

// nextEpoch returns the number of a new sleep announcement: never 0,
// which means awake.
func nextEpoch(e *uint64) uint64 {
	*e++
	if *e == 0 {
		*e = 1
	}
	return *e
}

// shouldSignal reports whether the peer's wait word w asks for a signal we
// have not sent yet: a peer that announced sleep is signalled once per
// announcement, however many messages (or slots) follow.
func shouldSignal(w uint64, signaled *uint64) bool {
	if w == 0 || w == *signaled {
		return false
	}
	*signaled = w
	return true
}

// stale returns the sequence number the slot at pos holds before the
// producer writes position pos: that of position pos-n, or 0 on the first
// lap.
func (r *consumer) stale(pos uint64) uint32 {
	if pos < r.n {
		return 0
	}
	return uint32(pos + 1 - r.n)
}

// publishDue reports whether a batch of slots, or of bulk bytes, has been
// read since our position was last published.
func (r *consumer) publishDue() bool {
	return r.pos-r.pub >= r.batch || r.bpos-r.bpub >= r.bbatch
}

// slot returns the address of the slot at pos. The index is ours, not
// the peer's (pos masked by the slot count, and len(slots) is
// n*SlotSize), so it needs no bounds check, which poll would otherwise
// pay for each word it touches.
func (r *consumer) slot(pos uint64) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(unsafe.SliceData(r.slots)), (pos&r.mask)*SlotSize)
}

// changed reports whether the slot at pos holds anything but its stale
// sequence number: a new fragment, or garbage that poll will reject.
func (r *consumer) changed() bool {
	return uint32(atomic.LoadUint64((*uint64)(unsafe.Add(r.slot(r.pos), ctrlOff)))) != r.stale(r.pos)
}

// takeBulk copies out the bulk message of n bytes whose descriptor is the
// slot at position p.
func (r *consumer) takeBulk(p uint64, n int) (bool, error) {
	// Read once: the producer may change the slot under us.
	at := binary.LittleEndian.Uint64(r.slots[int(p&r.mask)*SlotSize:])
	switch {
	case r.bulk == nil:
		return false, slotErr(p, "a bulk message, but the ring pair has no bulk region")
	case n <= BulkMin:
		return false, slotErr(p, "a %d-byte message in the bulk region", n)
	case at != r.bpos:
		return false, slotErr(p, "bulk message at %d, want %d", at, r.bpos)
	}
	// n <= maxMsg <= len(bulk), checked by the header's validation.
	if cap(r.buf) < n {
		r.buf = make([]byte, n, max(n, min(2*cap(r.buf), int(r.maxMsg))))
	}
	r.buf = r.buf[:n]
	start := int(at & r.bmask)
	k := copyCached(r.buf, r.bulk[start:])
	copyCached(r.buf[k:], r.bulk[:n-k])
	r.bpos += uint64(n)
	r.pos = p + 1
	return true, nil
}

// poll reads every fragment available, until a message is complete (true,
// the message in buf) or the next slot is not written yet (false). A
// message in progress survives between calls.
func (r *consumer) poll() (bool, error) {
	for {
		p := r.pos
		slot := r.slot(p)
		w := atomic.LoadUint64((*uint64)(unsafe.Add(slot, ctrlOff)))
		if seq := uint32(w); seq != uint32(p+1) {
			if seq == r.stale(p) {
				return false, nil
			}
			return false, slotErr(p, "sequence number %#x, want %#x or %#x", seq, uint32(p+1), r.stale(p))
		}
		info := uint32(w >> 32)
		if r.msgLen < 0 {
			n := info & infoLenMax
			if info&(infoFirst|infoCaps|infoBulk) != infoFirst || n > r.maxMsg || n > BulkMin {
				bulk, err := r.checkFirst(p, info)
				if err != nil {
					return false, err
				}
				if bulk {
					return r.takeBulk(p, int(n))
				}
			}
			if cap(r.buf) < int(n) {
				r.buf = make([]byte, n, max(int(n), min(2*cap(r.buf), int(r.maxMsg))))
			}
			r.buf = r.buf[:n]
			r.msgLen, r.got, r.frag = int(n), 0, 0
		} else if info != r.frag {
			return false, slotErr(p, "info %#x, want continuation %d", info, r.frag)
		}
		k := min(SlotPayload, r.msgLen-r.got)
		payload := unsafe.Slice((*byte)(slot), SlotPayload)
		if k == 8 {
			copy8(r.buf[r.got:r.got+8], payload)
		} else {
			copy(r.buf[r.got:r.got+k], payload[:k])
		}
		r.got += k
		r.frag++
		r.pos = p + 1
		if r.got == r.msgLen {
			r.msgLen = -1
			return true, nil
		}
	}
}

// checkFirst looks at the info of the first slot of a message, at
// position p, that is not the commonest kind (a first slot, no flags, at
// most BulkMin bytes): it reports a bulk message's descriptor (bulk), a
// longer message in the slots of a ring pair without a bulk region (no
// error), or why the info is wrong. Out of poll's loop: the formatting of
// the errors would otherwise cost every message.
func (r *consumer) checkFirst(p uint64, info uint32) (bulk bool, err error) {
	n := info & infoLenMax
	switch {
	case info&infoFirst == 0:
		return false, slotErr(p, "continuation (info %#x) where a message starts", info)
	case info&infoCaps != 0:
		return false, slotErr(p, "descriptor passing is not supported yet")
	case n > r.maxMsg:
		return false, slotErr(p, "message length %d exceeds the maximum %d", n, r.maxMsg)
	case info&infoBulk != 0:
		return true, nil
	case r.bulk != nil && n > BulkMin:
		return false, slotErr(p, "a %d-byte message outside the bulk region", n)
	}
	return false, nil
}

// slotErr is the protocol error of the slot at position p.
func slotErr(p uint64, format string, args ...any) error {
	return protoErr(fmt.Sprintf("slot %d: ", p) + fmt.Sprintf(format, args...))
}

package spawn

// ring holds the last cap bytes of a program's output, addressed by
// absolute offset in everything the program wrote: end is the offset
// after the last byte, and the ring holds [end-len, end).
type ring struct {
	buf []byte // grows up to cap, then wraps
	cap int
	end uint64 // bytes written in all
}

func newRing(cap int) *ring { return &ring{cap: cap} }

// start returns the offset of the oldest byte held.
func (r *ring) start() uint64 { return r.end - uint64(len(r.buf)) }

// write appends p, dropping the oldest bytes beyond cap.
func (r *ring) write(p []byte) {
	if len(p) >= r.cap {
		r.end += uint64(len(p)) // the part cut off counts as written too
		r.buf = append(r.buf[:0], p[len(p)-r.cap:]...)
		return
	}
	if len(r.buf)+len(p) <= r.cap {
		r.buf = append(r.buf, p...)
	} else {
		// Keep the newest cap-len(p) bytes, then append: a copy within buf,
		// whose capacity is already cap.
		keep := r.cap - len(p)
		n := copy(r.buf, r.buf[len(r.buf)-keep:])
		r.buf = append(r.buf[:n], p...)
	}
	r.end += uint64(len(p))
}

// read returns a copy of at most max bytes from offset from, and the
// offset they start at: the oldest held, if from is older.
func (r *ring) read(from uint64, max int) ([]byte, uint64) {
	s := r.start()
	if from < s {
		from = s
	}
	if from >= r.end {
		return nil, r.end
	}
	b := r.buf[from-s:]
	if len(b) > max {
		b = b[:max]
	}
	return append([]byte(nil), b...), from
}

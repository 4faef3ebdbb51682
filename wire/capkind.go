package wire

import (
	"fmt"
	"os"
)

// Typed capabilities: an argument declared with a kind (`cap(file)`,
// `give_away_cap(event)`, docs/idl.md) has a Go type of its own in
// generated code, and these helpers pass it through the untyped Cap of the
// wire.

// PtrCap returns p as a Cap, or nil when p is a nil pointer (which the
// Encoder refuses as a missing capability, where a nil pointer in a Cap
// would be taken for one).
func PtrCap[P interface {
	*E
	Cap
}, E any](p P) Cap {
	if p == nil {
		return nil
	}
	return p
}

// CapAs decodes the capability of field as d.Cap does and converts it
// with conv to its kind's type. A capability conv refuses fails decoding
// with ErrCap, naming field and conv's reason; conv closes what it
// refuses. The zero T is returned on failure.
func CapAs[T any](d *Decoder, field string, conv func(Cap) (T, error)) T {
	var zero T
	off := d.off
	c := d.Cap(field)
	if c == nil {
		return zero
	}
	v, err := conv(c)
	if err != nil {
		d.fault.fail(ErrCap, d.name, field, off, err.Error())
		d.off = len(d.b)
		return zero
	}
	return v
}

// FileOf is the conversion of a `cap(file)`: the *os.File the capability
// is (every descriptor received from another process is one), or else a
// duplicate of its descriptor as one, c being closed.
func FileOf(c Cap) (*os.File, error) {
	if f, ok := c.(*os.File); ok {
		return f, nil
	}
	fd, err := DupFD(c)
	c.Close()
	if err != nil {
		return nil, fmt.Errorf("not a file: %w", err)
	}
	return os.NewFile(uintptr(fd), "cap"), nil
}

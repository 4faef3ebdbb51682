package idl

// The largest wire sizes and capability counts of values, arguments and
// frames: computed here once, for the checker and for every back end.
// They saturate at satMax rather than overflow, so that an absurd bound is
// reported as too large instead of wrapping around.

const satMax = 1 << 62

func satAdd(a, b uint64) uint64 {
	if a > satMax-b || b > satMax {
		return satMax
	}
	return a + b
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > satMax/a {
		return satMax
	}
	return a * b
}

// MaxWireSize returns the largest wire size of a value of t, saturating.
// A String field of a struct counts its bound; a String argument counts
// only its 4-byte length here, as its bound belongs to the argument (see
// Arg.MaxWireSize).
func (t *TypeRef) MaxWireSize() uint64 {
	if t.Decl != nil {
		return t.Decl.MaxWireSize()
	}
	if t.Builtin == String {
		return 4
	}
	return uint64(t.Builtin.WireSize())
}

// MaxWireSize returns the largest wire size of a value of the declared
// type d, saturating (see TypeRef.MaxWireSize).
func (d *TypeDecl) MaxWireSize() uint64 {
	switch d.Kind {
	case DeclAlias, DeclTypedef:
		return d.Elem.MaxWireSize()
	case DeclEnum:
		return 4
	case DeclArray:
		return satMul(d.Elem.MaxWireSize(), uint64(d.Len))
	case DeclStruct:
		var n uint64
		for _, f := range d.Fields {
			if b, fd := f.Type.Underlying(); fd == nil && b == String {
				n = satAdd(n, 4+uint64(f.Max))
			} else {
				n = satAdd(n, f.Type.MaxWireSize())
			}
		}
		return n
	}
	return 0
}

// MaxCaps returns the most capabilities a value of t carries, saturating.
func (t *TypeRef) MaxCaps() uint64 {
	b, d := t.Underlying()
	if d == nil {
		if b.IsCap() {
			return 1
		}
		return 0
	}
	switch d.Kind {
	case DeclAlias, DeclTypedef:
		return d.Elem.MaxCaps()
	case DeclArray:
		return satMul(d.Elem.MaxCaps(), uint64(d.Len))
	case DeclStruct:
		var n uint64
		for _, f := range d.Fields {
			n = satAdd(n, f.Type.MaxCaps())
		}
		return n
	}
	return 0
}

// MaxWireSize returns the largest wire size of the argument a, its bound
// included: a String's length and bytes, a dynamic array's count and
// elements.
func (a *Arg) MaxWireSize() uint64 {
	switch a.Shape {
	case ShapeString:
		return 4 + uint64(a.Max)
	case ShapeDynArray:
		return satAdd(4, satMul(a.Type.MaxWireSize(), uint64(a.Max)))
	}
	return a.Type.MaxWireSize()
}

// MaxCaps returns the most capabilities the argument a carries.
func (a *Arg) MaxCaps() uint64 {
	if a.Shape == ShapeDynArray {
		return satMul(a.Type.MaxCaps(), uint64(a.Max))
	}
	return a.Type.MaxCaps()
}

// FrameMax returns the largest frame the argument list can produce,
// header included, and the most capabilities it can carry, saturating.
// It is only meaningful on a checked Interface.
func FrameMax(args []*Arg) (size, caps uint64) {
	size = HeaderSize
	for _, a := range args {
		size = satAdd(size, a.MaxWireSize())
		caps = satAdd(caps, a.MaxCaps())
	}
	return size, caps
}

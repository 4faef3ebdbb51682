package c

import (
	"fmt"
	"strconv"

	"github.com/chanos/chanos/idl"
)

// The encoding and decoding of values, and the paths their faults name.
//
// A fault names its field as Go's wire package does (gen/golang's coder:
// Enter, Leave, LeaveIndex), as in lines[1].from.x, and generated C pays
// for that only when a fault happens. Each helper that can fail is given
// the name of its field, joined at generation time with the names of the
// fixed arrays around it (Go's Leave of a field whose path is known here).
// What only run time knows, an element's index and the path inside a
// struct helper, is added on the way out: after a struct helper's call,
// or at the end of an array element whose index the path holds, a check
// of the sticky error adds the levels up to the function
// (chanos_wire_leave_, chanos_wire_leave_index_) and returns, so that
// nothing runs after the first fault. For such a check to blame the right
// level the error must be clear where its construct starts: a guard
// returns there if an earlier field failed, unless the code before it
// already assures that (a check just passed, or nothing ran).

// level is one level of a fault's path inside a generated function: the
// field (or argument) a value belongs to, "" for an array type's element,
// and the loop variable of an array's element ("" for a field).
type level struct {
	name string
	idx  string
	call bool // a struct helper's call: its path is added at run time
}

// runtime reports whether l's part of the path is added by a check at run
// time rather than joined into the helpers' names.
func (l level) runtime() bool { return l.idx != "" || l.call }

// join is Go's fault.leave without an index: the path inner inside field.
func join(field, inner string) string {
	switch {
	case inner == "":
		return field
	case inner[0] == '[' || field == "":
		return field + inner
	}
	return field + "." + inner
}

// coder writes the statements of one encode or decode function.
type coder struct {
	g     *generator
	b     *body
	dec   bool
	x     string // the state: e or d, a pointer
	clean bool   // x->err is 0 here
	stmts []int  // statements written at each indent level
}

func newCoder(g *generator, b *body, dec bool, clean bool) *coder {
	x := "e"
	if dec {
		x = "d"
	}
	return &coder{g: g, b: b, dec: dec, x: x, clean: clean}
}

// stmt writes one statement (one line, or the first of several) at
// indent lv.
func (c *coder) stmt(lv int, format string, args ...any) {
	for len(c.stmts) <= lv {
		c.stmts = append(c.stmts, 0)
	}
	c.stmts[lv]++
	c.b.p.f("%s"+format, append([]any{ind(lv)}, args...)...)
}

// line writes a line that continues a statement.
func (c *coder) line(lv int, format string, args ...any) {
	c.b.p.f("%s"+format, append([]any{ind(lv)}, args...)...)
}

// leafName is the name a helper is given for its field, name, inside
// levels: name joined with the levels that enclose it up to the first one
// added at run time.
func leafName(name string, levels []level) string {
	for k := len(levels) - 1; k >= 0 && !levels[k].runtime(); k-- {
		name = join(levels[k].name, name)
	}
	return name
}

// guard writes a return for an error met before a construct whose checks
// need a clear error.
func (c *coder) guard(lv int) {
	if c.clean {
		return
	}
	c.stmt(lv, "if (%s->err != 0)", c.x)
	c.line(lv+1, "return;")
	c.clean = true
}

// check writes, at the end of the innermost of levels (one added at run
// time), the return of a fault with the levels' part of its path: each
// level added at run time takes the names of those outside it up to the
// next.
func (c *coder) check(lv int, levels []level) {
	var parts []level
	for k := len(levels) - 1; k >= 0; k-- {
		l := levels[k]
		if l.runtime() || len(parts) == 0 {
			parts = append(parts, level{name: l.name, idx: l.idx})
			continue
		}
		parts[len(parts)-1].name = join(l.name, parts[len(parts)-1].name)
	}
	fault := "d->fault"
	if !c.dec {
		fault = "e->buf->fault" // the buffer holds the encoder's record
	}
	c.stmt(lv, "if (%s->err != 0) {", c.x)
	for _, p := range parts {
		switch {
		case p.idx != "":
			c.line(lv+1, "chanos_wire_leave_index_(%s, %s, %s);", fault, strconv.Quote(p.name), p.idx)
		case p.name != "":
			c.line(lv+1, "chanos_wire_leave_(%s, %s);", fault, strconv.Quote(p.name))
		}
	}
	c.line(lv+1, "return;")
	c.line(lv, "}")
	c.clean = true
}

// canFail reports whether coding a value of t can fail: any read can run
// past the frame's end, but of the writes only an enum's and a
// capability's can.
func (c *coder) canFail(t *idl.TypeRef) bool {
	if c.dec {
		n, fixed := t.FixedSize()
		return n > 0 || !fixed
	}
	b, d := t.Underlying()
	if d == nil {
		return b.IsCap()
	}
	switch d.Kind {
	case idl.DeclEnum:
		return true
	case idl.DeclArray:
		return c.canFail(d.Elem)
	case idl.DeclStruct:
		for _, f := range d.Fields {
			if c.canFail(f.Type) {
				return true
			}
		}
	}
	return false
}

// checked is Go's: whether an element of type t gets its index in a
// fault's path, because coding it can fail otherwise than by running out
// of frame (a decoded bool, an enum, a capability) or it is a struct or an
// array.
func checked(t *idl.TypeRef, dec bool) bool {
	b, d := t.Underlying()
	if d != nil {
		return true
	}
	return b.IsCap() || (dec && b == idl.Bool)
}

// value codes lhs, of type t, the field or argument name inside levels
// (Go's coder.value). depth is the loop nesting.
func (c *coder) value(lv int, lhs string, t *idl.TypeRef, name string, levels []level, depth int) {
	_, d := t.Underlying()
	switch {
	case d == nil || d.Kind == idl.DeclEnum:
		c.scalar(lv, lhs, t, leafName(name, levels))
	case d.Kind == idl.DeclStruct:
		c.call(lv, lhs, d, append(levels, level{name: name, call: true}))
	case d.Kind == idl.DeclArray:
		c.array(lv, lhs, d, append(levels, level{name: name}), depth)
	}
}

// elem codes lhs, element idx of the array field name ("" in an array
// type) inside levels (Go's coder.elem).
func (c *coder) elem(lv int, lhs string, t *idl.TypeRef, name, idx string, levels []level, depth int) {
	if !checked(t, c.dec) {
		c.scalar(lv, lhs, t, leafName(name, levels))
		return
	}
	levels = append(levels, level{name: name, idx: idx})
	_, d := t.Underlying()
	switch {
	case d == nil || d.Kind == idl.DeclEnum:
		c.scalar(lv, lhs, t, "")
	case d.Kind == idl.DeclStruct:
		c.call(lv, lhs, d, levels)
		return
	default:
		c.array(lv, lhs, d, levels, depth)
	}
	if !c.clean && c.canFail(t) {
		c.check(lv, levels)
	}
}

// call codes lhs, of struct type d, with its helper; the innermost of
// levels is its own, added at run time.
func (c *coder) call(lv int, lhs string, d *idl.TypeDecl, levels []level) {
	fail := c.canFail(&idl.TypeRef{Name: d.Name, Decl: d})
	if fail {
		c.guard(lv)
	}
	if c.dec {
		c.stmt(lv, "dec_%s(d, &%s);", c.g.tname(d), lhs)
	} else {
		c.stmt(lv, "enc_%s(e, &%s);", c.g.tname(d), lhs)
	}
	if fail {
		c.clean = false
		c.check(lv, levels)
	}
}

// array codes lhs, a fixed array of type d, whose own level is the
// innermost of levels (Go's array type methods, inline).
func (c *coder) array(lv int, lhs string, d *idl.TypeDecl, levels []level, depth int) {
	if isByte(d.Elem) {
		if c.dec {
			c.stmt(lv, "chanos_dec_raw(d, %s, %s, %d);", strconv.Quote(leafName("", levels)), lhs, d.Len)
			c.clean = false
		} else {
			c.stmt(lv, "chanos_enc_raw(e, %s, %d);", lhs, d.Len)
		}
		return
	}
	v := loopVar(depth)
	c.b.loops = max(c.b.loops, depth+1)
	checks := checked(d.Elem, c.dec) && c.canFail(d.Elem)
	if checks {
		c.guard(lv)
	}
	c.loop(lv, fmt.Sprintf("for (%s = 0; %s < %d; %s++)", v, v, d.Len, v), func() {
		c.elem(lv+1, lhs+"["+v+"]", d.Elem, "", v, levels, depth+1)
	})
	switch {
	case checks && d.Len > 0: // each element ended in a check
		c.clean = true
	case c.canFail(d.Elem):
		c.clean = false
	}
}

// loop writes the loop head and the body that inner writes, in braces if
// it is more than one statement.
func (c *coder) loop(lv int, head string, inner func()) {
	saved := c.b.p
	c.b.p = printer{}
	for len(c.stmts) <= lv+1 {
		c.stmts = append(c.stmts, 0)
	}
	before := c.stmts[lv+1]
	inner()
	text := c.b.p.String()
	c.b.p = saved
	if c.stmts[lv+1]-before == 1 {
		c.stmt(lv, "%s", head)
		c.b.p.b.WriteString(text)
		return
	}
	c.stmt(lv, "%s {", head)
	c.b.p.b.WriteString(text)
	c.line(lv, "}")
}

// scalar codes lhs, of builtin or enum type t, for the helper named name.
func (c *coder) scalar(lv int, lhs string, t *idl.TypeRef, name string) {
	q := strconv.Quote(name)
	b, d := t.Underlying()
	if c.dec {
		c.clean = false
		switch {
		case d != nil: // an enum
			c.stmt(lv, "%s = (%s)chanos_dec_enum(d, %s, %d);", lhs, c.g.ctype(t), q, len(d.Enumerators))
		case b == idl.Iref:
			c.stmt(lv, "chanos_dec_iref(d, %s, &%s);", q, lhs)
		case b.IsCap():
			c.stmt(lv, "%s = chanos_dec_cap(d, %s);", lhs, q)
		default:
			c.stmt(lv, "%s = chanos_dec_%s(d, %s);", lhs, wireFunc[b], q)
		}
		return
	}
	switch {
	case d != nil:
		c.stmt(lv, "chanos_enc_enum(e, %s, (uint32_t)%s, %d);", q, lhs, len(d.Enumerators))
		c.clean = false
	case b == idl.Iref:
		c.stmt(lv, "chanos_enc_iref(e, &%s);", lhs)
	case b == idl.Cap:
		c.stmt(lv, "chanos_enc_cap(e, %s, %s);", q, lhs)
		c.clean = false
	case b == idl.GiveAwayCap:
		c.stmt(lv, "chanos_enc_give_away_cap(e, %s, %s);", q, lhs)
		c.clean = false
	default:
		c.stmt(lv, "chanos_enc_%s(e, %s);", wireFunc[b], lhs)
	}
}

// arg codes the argument a of m, the member m->NAME (Go's coder.arg).
func (c *coder) arg(m *idl.Message, a *idl.Arg) {
	lhs := "m->" + Member(a.Name)
	bound := c.g.argBound(m, a)
	q := strconv.Quote(a.Name)
	switch {
	case a.Shape == idl.ShapeString && c.dec:
		c.stmt(1, "%s = chanos_dec_str(d, %s, %s);", lhs, q, bound)
	case a.Shape == idl.ShapeString:
		c.stmt(1, "chanos_enc_str(e, %s, %s, %s);", q, lhs, bound)
	case a.Shape == idl.ShapeDynArray && bytesView(a.Type) && c.dec:
		c.stmt(1, "%s = chanos_dec_bytes(d, %s, %s);", lhs, q, bound)
	case a.Shape == idl.ShapeDynArray && bytesView(a.Type):
		c.stmt(1, "chanos_enc_bytes(e, %s, %s, %s);", q, lhs, bound)
	case a.Shape == idl.ShapeDynArray:
		c.dynArray(lhs, m, a, bound)
		return
	default:
		c.value(1, lhs, a.Type, a.Name, nil, 0)
		return
	}
	c.clean = false
}

// dynArray codes the count and the elements of a dynamic array argument.
func (c *coder) dynArray(lhs string, m *idl.Message, a *idl.Arg, bound string) {
	q := strconv.Quote(a.Name)
	checks := checked(a.Type, c.dec) && c.canFail(a.Type)
	c.b.loops = max(c.b.loops, 1)
	n := "n"
	if c.dec {
		// A count read after an error is 0, as is one that failed: the
		// elements' checks need no guard.
		n = "m->" + Member(a.LenName)
		size, _ := a.Type.FixedSize() // 0 when it varies, as Go's
		c.stmt(1, "%s = chanos_dec_count(d, %s, %s, %d);", n, q, bound, size)
	} else {
		if checks {
			c.guard(1)
		}
		c.b.count = true
		c.stmt(1, "n = chanos_enc_count(e, %s, m->%s, %s);", q, Member(a.LenName), bound)
	}
	// The elements are coded only while the error is clear: a count
	// that failed is 0.
	c.clean = true
	c.loop(1, fmt.Sprintf("for (i = 0; i < %s; i++)", n), func() {
		c.elem(2, lhs+"[i]", a.Type, a.Name, "i", nil, 1)
	})
	c.clean = false
}

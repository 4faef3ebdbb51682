package golang

import (
	"fmt"
	"strings"

	"github.com/chanos/chanos/idl"
)

// carriesCaps reports whether frames of f may carry capabilities: those
// travel as frames on every interconnect, even within one process, so
// that the connection gives the receiver of a cap a copy of its own.
func carriesCaps(f *frameInfo) bool {
	var args []*idl.Arg
	for _, a := range f.args {
		args = append(args, a.arg)
	}
	_, caps := idl.FrameMax(args)
	return caps > 0
}

// needsCopy reports whether copying message f for the local interconnect
// takes more than copying its struct: slices to copy, or bounds and enums
// to check as Encode does.
func needsCopy(f *frameInfo) bool {
	for _, a := range f.args {
		_, decl := a.arg.Type.Underlying()
		if a.arg.Shape != idl.ShapeScalar || (decl != nil && decl.Kind == idl.DeclEnum) || nestedChecks(a.arg.Type) {
			return true
		}
	}
	return false
}

// nestedChecks reports whether values of t, a struct or a fixed array,
// hold an enum or a bounded string somewhere inside: what Encode checks
// and a copy of the struct does not.
func nestedChecks(t *idl.TypeRef) bool {
	_, decl := t.Underlying()
	if decl == nil {
		return false
	}
	switch decl.Kind {
	case idl.DeclStruct:
		for _, fd := range decl.Fields {
			b, d := fd.Type.Underlying()
			if (d == nil && b == idl.String) || (d != nil && d.Kind == idl.DeclEnum) || nestedChecks(fd.Type) {
				return true
			}
		}
	case idl.DeclArray:
		_, d := decl.Elem.Underlying()
		return (d != nil && d.Kind == idl.DeclEnum) || nestedChecks(decl.Elem)
	}
	return false
}

// copyMethod writes copy for a message: what the local interconnect
// passes instead of its frame, a copy that shares no memory with m,
// checked as Encode checks the strings, dynamic arrays and enums.
func (g *generator) copyMethod(f *frameInfo) {
	var checks []string
	nested := false
	for _, a := range f.args {
		nested = nested || nestedChecks(a.arg.Type)
	}
	for _, a := range f.args {
		if nested {
			// Encode checks the whole message, inside structs and
			// arrays too.
			break
		}
		field := a.arg.Name
		_, decl := a.arg.Type.Underlying()
		enumN := 0
		if decl != nil && decl.Kind == idl.DeclEnum {
			enumN = len(decl.Enumerators)
		}
		switch a.arg.Shape {
		case idl.ShapeString:
			checks = append(checks, fmt.Sprintf("wire.CheckString(%q, %q, m.%s, %s)", f.errName, field, a.field, a.bound))
		case idl.ShapeDynArray:
			checks = append(checks, fmt.Sprintf("wire.CheckCount(%q, %q, len(m.%s), %s)", f.errName, field, a.field, a.bound))
			if enumN > 0 {
				checks = append(checks, fmt.Sprintf("wire.CheckEnums(%q, %q, m.%s, %d)", f.errName, field, a.field, enumN))
			}
		default:
			if enumN > 0 {
				checks = append(checks, fmt.Sprintf("wire.CheckEnum(%q, %q, uint32(m.%s), %d)", f.errName, field, a.field, enumN))
			}
		}
	}
	g.p("// copy returns a copy of m that shares no memory with it, checked as")
	g.p("// Encode would check it: what the local interconnect passes.")
	g.p("func (m *%s) copy() (*%s, error) {", f.typ, f.typ)
	if nested {
		g.p("// Enums and strings inside structs and arrays: checked by encoding.")
		g.p("var b wire.Buffer")
		g.p("if err := m.Encode(&b); err != nil {")
		g.p("return nil, err")
		g.p("}")
	} else if len(checks) > 0 {
		g.p("if err := wire.First(%s); err != nil {", strings.Join(checks, ",\n"))
		g.p("return nil, err")
		g.p("}")
	}
	g.p("c := *m")
	for _, a := range f.args {
		if a.arg.Shape == idl.ShapeDynArray {
			g.p("c.%s = append(%s(nil), m.%s...)", a.field, g.argType(a.arg), a.field)
		}
	}
	g.p("return &c, nil")
	g.p("}")
	g.p("")
}

// connection writes what ties the interface to the runtime (genrt): its
// Binding, Conn, Connect, Listener, Export and Serve, and serve and
// serveFixed, the Server's dispatch without Dispatch's allocations.
func (g *generator) connection() {
	name := g.iface.Name
	g.p("// Interface describes %s to the connection engine.", name)
	g.p("var Interface = chanos.Interface{Name: InterfaceName, MaxFrameSize: MaxFrameSize, Fingerprint: Fingerprint, Definition: Definition}")
	g.p("")
	g.p("// binding is %s's table for the runtime.", name)
	g.p("var binding = genrt.Binding[Msg, Server, *Client]{")
	g.p("Interface: Interface,")
	g.p("Decode: Decode,")
	g.p("As: asMsg,")
	g.p("Serve: serve,")
	if fixed := g.fixedMessages(); len(fixed) > 0 {
		g.p("Fixed: []uint16{%s},", strings.Join(fixed, ", "))
	}
	g.p("}")
	g.p("")
	g.p("// asMsg is the runtime's type assertion of a message value to Msg")
	g.p("// (genrt.Binding.As).")
	g.p("func asMsg(m wire.Message) (Msg, bool) {")
	g.p("v, ok := m.(Msg)")
	g.p("return v, ok")
	g.p("}")
	g.p("")
	g.p("// Conn is a connection that speaks %s: the rpc stubs and Send of Client,", name)
	g.p("// and for what the peer sends, the methods of genrt.Stream:")
	g.p("//")
	g.p("//	Receive(ctx) (Msg, error)  // the next message or call, decoded")
	g.p("//	Recv() <-chan Msg          // what the peer sends, for select")
	g.p("//	Handle(ctx, srv) error     // the next one, to srv's method")
	g.p("//	Serve(ctx, srv, opts...) error  // each one, rpc replies sent, until the end")
	g.p("//	Err() error                // why the connection ended")
	g.p("//	Close() error")
	g.p("//	Raw() *chanos.Conn         // the untyped connection")
	g.p("type Conn struct {")
	g.p("*Client")
	g.p("*genrt.Stream[Msg, Server, *Client]")
	g.p("}")
	g.p("")
	g.p("// NewConn returns the typed view of c, a connection that speaks %s.", name)
	g.p("func NewConn(c *chanos.Conn) *Conn {")
	g.p("from := &Client{c: genrt.Engine(c)}")
	g.p("return &Conn{Client: from, Stream: genrt.NewStream(c, &binding, from)}")
	g.p("}")
	g.p("")
	g.p("// Connect binds to the %s service exported under name on d's machine,", name)
	g.p("// waiting for the name to appear until ctx ends.")
	g.p("func Connect(ctx context.Context, d *chanos.Domain, name string) (*Conn, error) {")
	g.p("return genrt.Connect(ctx, d, name, Interface, NewConn)")
	g.p("}")
	g.p("")
	g.p("// ConnectRef binds to the %s service that ref names: its iref, whose", name)
	g.p("// token is the capability to bind it (chanos.ConnectRef).")
	g.p("func ConnectRef(ctx context.Context, d *chanos.Domain, ref wire.Iref) (*Conn, error) {")
	g.p("return genrt.ConnectRef(ctx, d, ref, Interface, NewConn)")
	g.p("}")
	g.p("")
	g.p("// Dialer keeps a connection to an export of %s and connects again once", name)
	g.p("// it has ended, for a client that outlives its server's restarts")
	g.p("// (chanos.Dialer). Its methods: Conn(ctx) (*Conn, error), the connection,")
	g.p("// new when the last one ended; Close() error.")
	g.p("type Dialer = genrt.Dialer[*Conn]")
	g.p("")
	g.p("// NewDialer returns a Dialer of the %s service exported under name on", name)
	g.p("// d's machine. It connects on its first Conn.")
	g.p("func NewDialer(d *chanos.Domain, name string) *Dialer {")
	g.p("return genrt.Dial(d, name, Interface, NewConn)")
	g.p("}")
	g.p("")
	g.p("// Listener accepts the connections bound to an export of %s. Its", name)
	g.p("// methods, genrt.Listener's:")
	g.p("//")
	g.p("//	Accept(ctx) (*Conn, error)")
	g.p("//	Serve(ctx, serve func(ctx, *Conn) error) error  // serve in a goroutine per connection")
	g.p("//	Close() error              // withdraws the name")
	g.p("//	Name() string")
	g.p("//	Ref() wire.Iref            // the capability to bind the export")
	g.p("//	Raw() *chanos.Listener     // the untyped listener")
	g.p("type Listener = genrt.Listener[*Conn]")
	g.p("")
	g.p("// Export registers name for a %s service on d's machine and returns", name)
	g.p("// its listener. The name is removed when the listener closes or the")
	g.p("// domain ends. opts say who may bind it (chanos.Private,")
	g.p("// chanos.AllowUIDs, chanos.AllowPrograms); by default, any domain by name.")
	g.p("func Export(ctx context.Context, d *chanos.Domain, name string, opts ...chanos.ExportOption) (*Listener, error) {")
	g.p("return genrt.Export(ctx, d, name, Interface, NewConn, opts...)")
	g.p("}")
	g.p("")
	g.p("// Serve accepts connections on l until ctx ends or l closes, and serves")
	g.p("// each (Conn.Serve, with opts) in a goroutine of its own.")
	g.p("func Serve(ctx context.Context, l *Listener, srv Server, opts ...chanos.ServeOption) error {")
	g.p("return l.Serve(ctx, func(ctx context.Context, c *Conn) error { return c.Serve(ctx, srv, opts...) })")
	g.p("}")
	g.p("")
	g.serve()
}

// fixedMessages returns the number constants of the messages of plain
// fields only, whose frames have one size: Handle gives them to serve as
// the link delivered them (genrt.Binding.Fixed).
func (g *generator) fixedMessages() []string {
	var fixed []string
	for _, mi := range g.msgs {
		if _, fast := fastFrame(mi.frames[0].args); fast && !mi.msg.RPC {
			fixed = append(fixed, mi.number)
		}
	}
	return fixed
}

// serve emits the Server's dispatch for the runtime: Dispatch without its
// allocations. A message or call is decoded into a local value, which the
// method gets; on the local interconnect a message's value is copied. A
// call handled inline is answered at once, from the stack: ReplyFrame for
// a reply of a fixed size, ReplyEncoded for another.
func (g *generator) serve() {
	g.p("// serve gives in, a message or rpc call, to srv's method")
	g.p("// (genrt.Binding.Serve). Its locals are reserved names, as the Server's")
	g.p("// results are declared beside them.")
	g.p("func serve(ctx context.Context, srv Server, from *Client, in *chanos.Incoming) (wire.Message, error) {")
	if len(g.msgs) > 0 {
		g.p("switch {")
	}
	for _, mi := range g.msgs {
		f := mi.frames[0]
		var decode string
		if !mi.msg.RPC {
			g.p("case in.Header.Msg == %s && in.Kind == wire.KindMessage:", mi.number)
			g.p("var m %s", f.typ)
			decode = "m.Decode"
			if g.borrowed(f) { // valid until the handler returns
				decode = "m.decodeView"
			}
			g.p("if err := genrt.Take(in, &m, %s); err != nil {", decode)
			g.p("return nil, from.c.Violation(err)")
			g.p("}")
			g.p("return nil, srv.%s(ctx, from, m)", mi.name)
			continue
		}
		reply := mi.frames[1]
		g.p("case in.Header.Msg == %s && in.Kind == wire.KindCall:", mi.number)
		g.p("var m %s", f.typ)
		decode = "m.Decode"
		if g.borrowed(f) {
			// Views into the frame, which outlives the handler only when
			// the call runs inline and its reply is sent before return.
			decode = "genrt.Borrow(in, m.Decode, m.decodeView)"
		}
		g.p("if err := genrt.Take(in, &m, %s); err != nil {", decode)
		g.p("return nil, from.c.Violation(err)")
		g.p("}")
		inits := g.callMethod(mi, "m", "return nil, err")
		g.p("if !in.Inline {")
		g.p("return &%s{%s}, nil", reply.typ, inits)
		g.p("}")
		if size, fast := fastFrame(reply.args); fast {
			// The reply's frame on the stack, sent at once (ReplyFrame).
			g.p("var frame [wire.HeaderSize + %d]byte", size)
			if size > 0 {
				g.p("(&%s{%s}).put(wire.PutFixed(frame[:], %s, wire.KindReply))", reply.typ, inits, mi.number)
			} else {
				g.p("wire.PutFixed(frame[:], %s, wire.KindReply)", mi.number)
			}
			g.p("return from.c.ReplyFrame(ctx, in, frame[:])")
			continue
		}
		if tail, size, ok := tailFrame(reply.args); ok {
			// Plain fields around an array of bytes: in parts, the array
			// copied from where it is.
			g.p("var f [wire.HeaderSize + %d]byte", size)
			g.p("head, tail, err := (&%s{%s}).parts(&f)", reply.typ, inits)
			g.p("if err != nil {")
			g.p("return from.c.ReplyUnencodable(ctx, in, err)")
			g.p("}")
			g.p("return from.c.ReplyParts(ctx, in, head, %s, tail)", reply.args[tail].param)
			continue
		}
		g.p("return from.c.ReplyEncoded(ctx, in, (&%s{%s}).Encode)", reply.typ, inits)
	}
	if len(g.msgs) > 0 {
		g.p("}")
	}
	g.p("return nil, from.c.Violation(genrt.Unknown(InterfaceName, in))")
	g.p("}")
	g.p("")
}

package golang

import (
	"fmt"
	"slices"

	"github.com/chanos/chanos/idl"
)

// cloneMethods writes MsgClone and MsgSet for a message, call or reply:
// the local interconnect passes copies of values instead of frames.
func (g *generator) cloneMethods(f *frameInfo) {
	g.p("// MsgClone returns a copy of m that shares no memory with it: its slices")
	g.p("// are copied. The local interconnect sends the copy, so the sender may")
	g.p("// reuse m.")
	g.p("func (m *%s) MsgClone() wire.Message {", f.typ)
	g.p("c := *m")
	for _, a := range f.args {
		if a.arg.Shape == idl.ShapeDynArray {
			g.p("c.%s = append(%s(nil), m.%s...)", a.field, g.argType(a.arg), a.field)
		}
	}
	g.p("return &c")
	g.p("}")
	g.p("")
	g.p("// MsgSet sets m to the value of src and reports true if src is a *%s.", f.typ)
	g.p("func (m *%s) MsgSet(src wire.Message) bool {", f.typ)
	g.p("s, ok := src.(*%s)", f.typ)
	g.p("if ok {")
	g.p("*m = *s")
	g.p("}")
	g.p("return ok")
	g.p("}")
	g.p("")
	g.validateMethod(f)
}

// validateMethod writes MsgValidate: the encoder's checks of the
// top-level strings, arrays and enums, without encoding.
func (g *generator) validateMethod(f *frameInfo) {
	g.p("// MsgValidate reports what Encode would refuse in m's strings, dynamic")
	g.p("// arrays and enum arguments, without encoding it; the local interconnect")
	g.p("// calls it, as it passes messages as values.")
	recv := "m "
	var body []string
	for _, a := range f.args {
		field := a.arg.Name
		_, decl := a.arg.Type.Underlying()
		enumN := 0
		if decl != nil && decl.Kind == idl.DeclEnum {
			enumN = len(decl.Enumerators)
		}
		switch a.arg.Shape {
		case idl.ShapeString:
			body = append(body, fmt.Sprintf("if err := wire.CheckString(%q, %q, m.%s, %s); err != nil {\nreturn err\n}", f.errName, field, a.field, a.bound))
		case idl.ShapeDynArray:
			body = append(body, fmt.Sprintf("if err := wire.CheckCount(%q, %q, len(m.%s), %s); err != nil {\nreturn err\n}", f.errName, field, a.field, a.bound))
			if enumN > 0 {
				body = append(body, fmt.Sprintf("for i, v := range m.%s {\nif err := wire.CheckEnum(%q, fmt.Sprintf(\"%s[%%d]\", i), uint32(v), %d); err != nil {\nreturn err\n}\n}", a.field, f.errName, field, enumN))
			}
		default:
			if enumN > 0 {
				body = append(body, fmt.Sprintf("if err := wire.CheckEnum(%q, %q, uint32(m.%s), %d); err != nil {\nreturn err\n}", f.errName, field, a.field, enumN))
			}
		}
	}
	if len(body) == 0 {
		recv = ""
	}
	g.p("func (%s*%s) MsgValidate() error {", recv, f.typ)
	for _, b := range body {
		g.p("%s", b)
	}
	g.p("return nil")
	g.p("}")
	g.p("")
}

// connection writes the typed connection plumbing over package chanos:
// Interface, Conn, Connect, Listener, Export, Serve and ServeConn.
func (g *generator) connection() {
	name := g.iface.Name
	g.p("// Interface describes %s to the connection layer.", name)
	g.p("var Interface = chanos.Interface{Name: InterfaceName, MaxFrameSize: MaxFrameSize}")
	g.p("")
	g.p("// Conn is a connection that speaks %s: the rpc stubs and Send of Client,", name)
	g.p("// and Receive and Recv for what the peer sends.")
	g.p("type Conn struct {")
	g.p("*Client")
	g.p("c *chanos.Conn")
	g.p("once sync.Once")
	g.p("recv chan Msg")
	g.p("}")
	g.p("")
	g.p("// NewConn returns the typed view of c, a connection that speaks %s.", name)
	g.p("func NewConn(c *chanos.Conn) *Conn { return &Conn{Client: NewClient(c), c: c} }")
	g.p("")
	g.p("// Connect binds to the %s service exported under name on d's machine,", name)
	g.p("// waiting for the name to appear until ctx ends.")
	g.p("func Connect(ctx context.Context, d *chanos.Domain, name string) (*Conn, error) {")
	g.p("c, err := chanos.Connect(ctx, d, name, Interface)")
	g.p("if err != nil {")
	g.p("return nil, err")
	g.p("}")
	g.p("return NewConn(c), nil")
	g.p("}")
	g.p("")
	g.p("// decodeIncoming turns what a connection received into a Msg.")
	g.p("func decodeIncoming(in *chanos.Incoming) (Msg, error) {")
	g.p("if in.Msg != nil {")
	// A message value of the local interconnect (calls and replies travel
	// as frames), by concrete type: a conversion to Msg would look its
	// itab up.
	var types []string
	for _, mi := range g.msgs {
		if !mi.msg.RPC {
			types = append(types, "*"+mi.frames[0].typ)
		}
	}
	if len(types) > 0 {
		g.p("switch m := in.Msg.(type) {")
		for _, t := range types {
			g.p("case %s:", t)
			g.p("return m, nil")
		}
		g.p("}")
	}
	g.p(`return nil, fmt.Errorf("%%s: received a %%s: %%w", InterfaceName, in.Msg.MsgName(), wire.ErrUnknownMessage)`)
	g.p("}")
	g.p("// The connection parsed the header already: no need for Decode's.")
	g.p("if m := New(in.Header.Msg, in.Kind); m != nil {")
	g.p("if err := m.Decode(in.Frame, in.Caps); err != nil {")
	g.p("return nil, err")
	g.p("}")
	g.p("return m, nil")
	g.p("}")
	g.p("return Decode(in.Frame, in.Caps) // says what is wrong")
	g.p("}")
	g.p("")
	g.p("// Receive waits for the next message or rpc call from the peer, reading")
	g.p("// the connection in the calling goroutine. A frame that does not decode")
	g.p("// ends the connection with an error matching chanos.ErrProtocol; at the")
	g.p("// connection's end, Receive returns why (see chanos.Conn.Err).")
	g.p("func (c *Conn) Receive(ctx context.Context) (Msg, error) {")
	g.p("var m Msg")
	g.p("err := c.c.ReceiveFunc(ctx, func(in *chanos.Incoming) error {")
	g.p("var err error")
	g.p("if m, err = decodeIncoming(in); err != nil {")
	g.p("return c.c.Violation(err)")
	g.p("}")
	g.p("return nil")
	g.p("})")
	g.p("return m, err")
	g.p("}")
	g.p("")
	g.p("// Recv returns a channel of what the peer sends, for select. It is closed")
	g.p("// when the connection ends, and Err then says why. The first call starts")
	g.p("// a goroutine that receives on the channel's behalf (one hop per message")
	g.p("// compared with Receive); do not mix Recv and Receive on one connection.")
	g.p("func (c *Conn) Recv() <-chan Msg {")
	g.p("c.once.Do(func() {")
	g.p("c.recv = make(chan Msg, 64)")
	g.p("go func() {")
	g.p("defer close(c.recv)")
	g.p("ctx := c.c.Context()")
	g.p("for {")
	g.p("m, err := c.Receive(ctx)")
	g.p("if err != nil {")
	g.p("return")
	g.p("}")
	g.p("select {")
	g.p("case c.recv <- m:")
	g.p("case <-ctx.Done():")
	g.p("return")
	g.p("}")
	g.p("}")
	g.p("}()")
	g.p("})")
	g.p("return c.recv")
	g.p("}")
	g.p("")
	g.p("// Err returns why the connection ended, or nil while it is open.")
	g.p("func (c *Conn) Err() error { return c.c.Err() }")
	g.p("")
	g.p("// Close closes the connection.")
	g.p("func (c *Conn) Close() error { return c.c.Close() }")
	g.p("")
	g.p("// Raw returns the untyped connection.")
	g.p("func (c *Conn) Raw() *chanos.Conn { return c.c }")
	g.p("")
	g.p("// Listener accepts the connections bound to an export of %s.", name)
	g.p("type Listener struct {")
	g.p("l *chanos.Listener")
	g.p("}")
	g.p("")
	g.p("// Export registers name for a %s service on d's machine and returns", name)
	g.p("// its listener. The name is removed when the listener closes or the")
	g.p("// domain ends.")
	g.p("func Export(ctx context.Context, d *chanos.Domain, name string) (*Listener, error) {")
	g.p("l, err := chanos.Export(ctx, d, name, Interface)")
	g.p("if err != nil {")
	g.p("return nil, err")
	g.p("}")
	g.p("return &Listener{l: l}, nil")
	g.p("}")
	g.p("")
	g.p("// Accept waits for the next connection.")
	g.p("func (l *Listener) Accept(ctx context.Context) (*Conn, error) {")
	g.p("c, err := l.l.Accept(ctx)")
	g.p("if err != nil {")
	g.p("return nil, err")
	g.p("}")
	g.p("return NewConn(c), nil")
	g.p("}")
	g.p("")
	g.p("// Close withdraws the export.")
	g.p("func (l *Listener) Close() error { return l.l.Close() }")
	g.p("")
	g.p("// Raw returns the untyped listener.")
	g.p("func (l *Listener) Raw() *chanos.Listener { return l.l }")
	g.p("")
	g.p("// Serve accepts connections on l until ctx ends or l closes, and serves")
	g.p("// each with ServeConn, with opts, in a goroutine of its own.")
	g.p("func Serve(ctx context.Context, l *Listener, srv Server, opts ...chanos.ServeOption) error {")
	g.p("return l.l.Serve(ctx, func(ctx context.Context, c *chanos.Conn) error {")
	g.p("return ServeConn(ctx, NewConn(c), srv, opts...)")
	g.p("})")
	g.p("}")
	g.p("")
	g.p("// ServeConn calls srv's method for each message and rpc call that arrives")
	g.p("// on c, in the calling goroutine, and sends each rpc's reply, until the")
	g.p("// connection or ctx ends. It returns nil when the peer closes. With")
	g.p("// chanos.Concurrent, rpc calls run in goroutines of their own and see")
	g.p("// their callers' cancels.")
	g.p("func ServeConn(ctx context.Context, c *Conn, srv Server, opts ...chanos.ServeOption) error {")
	g.p("return c.c.Serve(ctx, func(ctx context.Context, in *chanos.Incoming) (wire.Message, error) {")
	g.p("return c.handle(ctx, srv, in)")
	g.p("}, opts...)")
	g.p("}")
	g.p("")
	g.p("// Handle waits for the next message or rpc call from the peer and calls")
	g.p("// srv's method for it in the calling goroutine, as ServeConn does for each;")
	g.p("// an rpc's results go back to the peer as its reply. It returns the")
	g.p("// error of a message's method. Unlike Receive it allocates nothing for a")
	g.p("// message of a fixed size, which srv's method gets by value: a client")
	g.p("// that reads the peer's messages one at a time can use it with a Server")
	g.p("// that implements only those messages' methods.")
	g.p("func (c *Conn) Handle(ctx context.Context, srv Server) error {")
	if g.hasMessages() {
		// A message goes straight to srv's method, one of a fixed size
		// from the frame the ring delivered: a client waiting for it
		// answers sooner.
		if g.hasFixedMessages() {
			g.p("return c.c.ReceiveFrame(ctx, func(frame []byte) (bool, error) {")
			g.p("return handleFixed(ctx, srv, c, frame)")
			g.p("}, func(in *chanos.Incoming) error {")
		} else {
			g.p("return c.c.ReceiveFunc(ctx, func(in *chanos.Incoming) error {")
		}
		g.p("if in.Kind == wire.KindMessage {")
		g.p("if ok, err := serveMessage(ctx, srv, c, in); ok {")
		g.p("return err")
		g.p("}")
		g.p("}")
		g.p("return c.c.ServeIncoming(ctx, in, func(ctx context.Context, in *chanos.Incoming) (wire.Message, error) {")
		g.p("return c.handle(ctx, srv, in)")
		g.p("})")
		g.p("})")
	} else {
		g.p("return c.c.ServeOne(ctx, func(ctx context.Context, in *chanos.Incoming) (wire.Message, error) {")
		g.p("return c.handle(ctx, srv, in)")
		g.p("})")
	}
	g.p("}")
	g.p("")
	g.p("// handle calls srv's method for in, a message or rpc call: ServeConn's")
	g.p("// and Handle's work for one frame.")
	g.p("func (c *Conn) handle(ctx context.Context, srv Server, in *chanos.Incoming) (wire.Message, error) {")
	if g.hasRPC() {
		g.p("if in.Kind == wire.KindCall && in.Frame != nil {")
		g.p("if reply, ok, err := serveCall(ctx, srv, c.c, in); ok {")
		g.p("return reply, err")
		g.p("}")
		g.p("}")
	}
	if g.hasMessages() {
		g.p("if in.Kind == wire.KindMessage {")
		g.p("if ok, err := serveMessage(ctx, srv, c, in); ok {")
		g.p("return nil, err")
		g.p("}")
		g.p("}")
	}
	g.p("m, err := decodeIncoming(in)")
	g.p("if err != nil {")
	g.p("return nil, c.c.Violation(err)")
	g.p("}")
	g.p("reply, err := Dispatch(ctx, srv, c.Client, m)")
	g.p("return reply, err")
	g.p("}")
	g.p("")
	if g.hasRPC() {
		g.serveCall()
	}
	if g.hasMessages() {
		g.serveMessage()
	}
	if g.hasFixedMessages() {
		g.handleFixed()
	}
}

// hasFixedMessages reports whether the interface declares a message of
// plain fields only, whose frames have one size.
func (g *generator) hasFixedMessages() bool {
	return slices.ContainsFunc(g.msgs, func(mi *msgInfo) bool {
		_, fast := fastFrame(mi.frames[0].args)
		return fast && !mi.msg.RPC
	})
}

// handleFixed emits Handle's path for messages of a fixed size: the frame
// as the ring delivered it, checked whole by wire.FixedBody, read at
// constant offsets, and the message given to srv's method. Anything else
// (another message, a malformed frame) is left to the general path.
func (g *generator) handleFixed() {
	g.p("// handleFixed gives a message of a fixed size straight to srv's method,")
	g.p("// from its frame as the ring delivered it (chanos.Conn.ReceiveFrame), and")
	g.p("// reports whether frame was one. It trusts nothing in frame that")
	g.p("// wire.FixedBody has not checked.")
	g.p("func handleFixed(ctx context.Context, srv Server, c *Conn, frame []byte) (bool, error) {")
	g.p("msg, ok := wire.PeekMsg(frame)")
	g.p("if !ok {")
	g.p("return false, nil")
	g.p("}")
	g.p("switch msg {")
	for _, mi := range g.msgs {
		f := mi.frames[0]
		size, fast := fastFrame(f.args)
		if mi.msg.RPC || !fast {
			continue
		}
		g.p("case %s:", mi.number)
		if len(f.args) == 0 {
			g.p("if _, ok := wire.FixedBody(frame, nil, %s, wire.KindMessage, 0); ok {", mi.number)
			g.p("return true, srv.%s(ctx, c.Client, %s{})", mi.name, f.typ)
			g.p("}")
			continue
		}
		g.p("if b, ok := wire.FixedBody(frame, nil, %s, wire.KindMessage, %d); ok {", mi.number, size)
		g.p("var m %s", f.typ)
		g.fastGets(f.args, "b", "", func(a *argInfo) string { return "m." + a.field })
		g.p("return true, srv.%s(ctx, c.Client, m)", mi.name)
		g.p("}")
	}
	g.p("}")
	g.p("return false, nil")
	g.p("}")
	g.p("")
}

// hasMessages reports whether the interface declares a message.
func (g *generator) hasMessages() bool {
	return slices.ContainsFunc(g.msgs, func(mi *msgInfo) bool { return !mi.msg.RPC })
}

// serveMessage emits ServeConn's path for messages: Dispatch without its
// allocation. The message is decoded into a local value, which the
// handler gets a copy of; on the local interconnect the value that came
// is copied.
func (g *generator) serveMessage() {
	g.p("// serveMessage calls srv's method for a message, as Dispatch does, and")
	g.p("// reports whether the message is one of this interface's. If it does")
	g.p("// not decode, it ends the connection and returns an error matching")
	g.p("// chanos.ErrProtocol.")
	g.p("func serveMessage(ctx context.Context, srv Server, c *Conn, in *chanos.Incoming) (bool, error) {")
	g.p("switch in.Header.Msg {")
	for _, mi := range g.msgs {
		if mi.msg.RPC {
			continue
		}
		f := mi.frames[0]
		g.p("case %s:", mi.number)
		g.p("var m %s", f.typ)
		g.p("if in.Msg != nil { // a value, on the local interconnect")
		g.p("v, ok := in.Msg.(*%s)", f.typ)
		g.p("if !ok || v == nil {")
		g.p(`return true, c.c.Violation(fmt.Errorf("%%s: message %%d came as a %%T", InterfaceName, in.Header.Msg, in.Msg))`)
		g.p("}")
		g.p("m = *v")
		if size, fast := fastFrame(f.args); fast && len(f.args) > 0 {
			g.p("} else if b, ok := wire.FixedBody(in.Frame, in.Caps, %s, wire.KindMessage, %d); ok {", mi.number, size)
			g.fastGets(f.args, "b", "", func(a *argInfo) string { return "m." + a.field })
		}
		decode := "Decode"
		if g.borrowed(f) { // valid until the handler returns
			decode = "decodeView"
		}
		g.p("} else if err := m.%s(in.Frame, in.Caps); err != nil {", decode)
		g.p("return true, c.c.Violation(err)")
		g.p("}")
		g.p("return true, srv.%s(ctx, c.Client, m)", mi.name)
	}
	g.p("}")
	g.p("return false, nil")
	g.p("}")
	g.p("")
}

// hasRPC reports whether the interface declares an rpc.
func (g *generator) hasRPC() bool {
	return slices.ContainsFunc(g.msgs, func(mi *msgInfo) bool { return mi.msg.RPC })
}

// serveCall emits ServeConn's path for rpc calls: Dispatch without its
// allocations. The call is decoded into a local value, and a call handled
// inline is answered from the stack: ReplyFrame for a reply of a fixed
// size, ReplyEncoded for another.
func (g *generator) serveCall() {
	g.p("// serveCall handles an rpc call as Dispatch does, and reports whether it")
	g.p("// is one of this interface's. A call run inline is answered at once, from")
	g.p("// the stack. If the call does not decode, it ends the connection and")
	g.p("// returns an error matching chanos.ErrProtocol. Its locals are reserved")
	g.p("// names, as the Server's results are declared beside them.")
	g.p("func serveCall(ctx context.Context, srv Server, c *chanos.Conn, call *chanos.Incoming) (wire.Message, bool, error) {")
	g.p("switch call.Header.Msg {")
	for _, mi := range g.msgs {
		if !mi.msg.RPC {
			continue
		}
		call, reply := mi.frames[0], mi.frames[1]
		g.p("case %s:", mi.number)
		g.p("var m %s", call.typ)
		if size, fast := fastFrame(call.args); fast && len(call.args) > 0 {
			// Decode's fast path, inline.
			g.p("if b, ok := wire.FixedBody(call.Frame, call.Caps, %s, wire.KindCall, %d); ok {", mi.number, size)
			g.fastGets(call.args, "b", "", func(a *argInfo) string { return "m." + a.field })
			g.p("} else if err := m.Decode(call.Frame, call.Caps); err != nil {")
		} else if g.borrowed(call) {
			// Views into the frame, which outlives the handler only when
			// the call runs inline and its reply is sent before return.
			g.p("var err error")
			g.p("if call.Inline {")
			g.p("err = m.decodeView(call.Frame, call.Caps)")
			g.p("} else {")
			g.p("err = m.Decode(call.Frame, call.Caps)")
			g.p("}")
			g.p("if err != nil {")
		} else {
			g.p("if err := m.Decode(call.Frame, call.Caps); err != nil {")
		}
		g.p("return nil, true, c.Violation(err)")
		g.p("}")
		inits := g.callMethod(mi, "m", "return nil, true, err")
		g.p("if call.Inline {")
		if size, fast := fastFrame(reply.args); fast {
			// The reply's frame on the stack, sent at once (ReplyFrame).
			g.p("var frame [wire.HeaderSize + %d]byte", size)
			g.p("wire.PutFixed(frame[:], %s, wire.KindReply)", mi.number)
			g.fastPuts(reply.args, "frame", "wire.HeaderSize", func(a *argInfo) string { return a.param })
			g.p("sent, err := c.ReplyFrame(ctx, call, frame[:])")
			g.p("return sent, true, err")
		} else if tail, size, ok := tailFrame(reply.args); ok {
			// A short array of bytes: the frame on the stack all the same.
			g.tailBranches(reply, tail, size, "wire.KindReply", "frame", func(a *argInfo) string { return a.param },
				func(frame string) {
					g.p("sent, err := c.ReplyFrame(ctx, call, %s)", frame)
					g.p("return sent, true, err")
				},
				func(head, body, tail string) {
					g.p("sent, err := c.ReplyParts(ctx, call, %s, %s, %s)", head, body, tail)
					g.p("return sent, true, err")
				})
			g.p("reply := %s{%s}", reply.typ, inits)
			g.p("sent, err := c.ReplyEncoded(ctx, call, reply.Encode)")
			g.p("return sent, true, err")
		} else {
			// The reply's value on the stack, encoded at once (ReplyEncoded).
			g.p("reply := %s{%s}", reply.typ, inits)
			g.p("sent, err := c.ReplyEncoded(ctx, call, reply.Encode)")
			g.p("return sent, true, err")
		}
		g.p("}")
		g.p("return &%s{%s}, true, nil", reply.typ, inits)
	}
	g.p("}")
	g.p("return nil, false, nil")
	g.p("}")
	g.p("")
}

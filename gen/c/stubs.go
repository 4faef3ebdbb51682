package c

import (
	"github.com/chanos/chanos/idl"
)

// The client stubs and the server dispatch (docs/codegen-c.md, "Stubs and
// dispatch"): per interface only the parts that differ, a function per
// message and rpc and a switch over the messages; the loop that drives the
// dispatch, and the steps every dispatch shares, live in libchanos
// (chanos_serve, c/src/serve.c).

func (g *generator) opsStruct() string    { return g.pfx + "_server_ops" }
func (g *generator) dispatchFunc() string { return g.pfx + "_dispatch" }
func (g *generator) serveFunc() string    { return g.pfx + "_serve" }

// stubName is the client function of m: IFACE_RPC for an rpc, and
// IFACE_MSG_send for a message.
func (g *generator) stubName(m *idl.Message) string {
	if m.RPC {
		return g.pfx + "_" + m.Name
	}
	return g.pfx + "_" + m.Name + "_send"
}

// claimStubs claims the C names of the stubs and the dispatch.
func (g *generator) claimStubs() error {
	for _, m := range g.iface.Messages {
		what := "the stub of message " + m.Name
		if m.RPC {
			what = "the stub of rpc " + m.Name
		}
		if err := g.file.add(g.stubName(m), m.Pos, what); err != nil {
			return err
		}
	}
	pos := g.iface.Pos
	for _, c := range []struct{ name, what string }{
		{g.opsStruct(), "the server's handlers of interface "},
		{g.dispatchFunc(), "the dispatch of interface "},
		{g.serveFunc(), "the serve loop of interface "},
		{g.pfx + "_replies_", "the dispatch's union of replies of interface "},
	} {
		if err := g.file.add(c.name, pos, c.what+g.iface.Name); err != nil {
			return err
		}
	}
	return nil
}

func (g *generator) stubParams(m *idl.Message) []string {
	fs := g.byMessage(m)
	if m.RPC {
		return []string{"chanos_conn *c", "const struct " + fs[0].cname + " *in",
			"struct " + fs[1].cname + " *out", "int timeout_ms"}
	}
	return []string{"chanos_conn *c", "const struct " + fs[0].cname + " *m", "int timeout_ms"}
}

func (g *generator) handlerParams(m *idl.Message) []string {
	fs := g.byMessage(m)
	if m.RPC {
		return []string{"void *ctx", "chanos_conn *c", "const struct " + fs[0].cname + " *in",
			"struct " + fs[1].cname + " *out"}
	}
	return []string{"void *ctx", "chanos_conn *c", "const struct " + fs[0].cname + " *m"}
}

// stubDecls writes the header's stubs, handler table, dispatch and serve.
func (g *generator) stubDecls(p *printer) {
	if len(g.iface.Messages) == 0 {
		return
	}
	p.comment("", "Client stubs. An rpc's stub encodes *in, calls and waits at most "+
		"timeout_ms (-1: forever) for the reply, and decodes it into *out, whose "+
		"views point into the connection's ring until its next receive. It returns "+
		"0, a CHANOS_ERR_* code, or CHANOS_ERR_REMOTE for an error reply, whose "+
		"code and detail chanos_conn_status gives; after a wire code (an argument "+
		"over its bound, a reply that does not decode), chanos_conn_fault says "+
		"which frame and field, and why. What the peer sends before the reply "+
		"is kept for the connection's next receives, in order (chanos_conn_call), "+
		"so a client whose server also sends it messages receives them. A "+
		"message's stub encodes *m and sends it, waiting at most timeout_ms for "+
		"ring space. The stubs encode into the connection's buffer "+
		"(chanos_conn_buf): one thread at a time per connection.")
	for _, m := range g.iface.Messages {
		p.f("%s", proto("", "int "+g.stubName(m), g.stubParams(m), ";"))
	}
	p.blank()
	p.comment("", "The server's handlers, one per message and rpc, for "+g.dispatchFunc()+
		" and "+g.serveFunc()+"; NULL for one the server does not handle (a call "+
		"of it is answered CHANOS_SERVE_UNIMPLEMENTED, a message dropped). ctx is "+
		"the one given to the dispatch; the arguments' views point into the ring "+
		"until the handler returns. An rpc's handler fills in *out (zeroed) and "+
		"returns 0, a positive error code for an error reply (whose detail "+
		"chanos_conn_set_detail sets), or "+
		"CHANOS_SERVE_DEFER (chanos.h); a message's handler returns 0. Any other "+
		"negative code ends serving the connection.")
	p.f("struct %s {", g.opsStruct())
	for _, m := range g.iface.Messages {
		p.f("%s", proto("    ", "int (*"+Member(m.Name)+")", g.handlerParams(m), ";"))
	}
	p.f("};")
	p.blank()
	p.comment("", g.dispatchFunc()+" serves one frame f of the connection c: a "+
		"chanos_dispatch_fn, whose ops is a const struct "+g.opsStruct()+". "+
		g.serveFunc()+" serves c until the peer closes, with chanos_serve.")
	p.f("%s", proto("", "int "+g.dispatchFunc(), []string{"chanos_conn *c", "const struct chanos_frame *f",
		"const void *ops", "void *ctx"}, ";"))
	p.f("%s", proto("", "int "+g.serveFunc(), []string{"chanos_conn *c", "const struct " + g.opsStruct() + " *ops",
		"void *ctx", "int timeout_ms"}, ";"))
	p.blank()
}

// stubDefs writes the source's stubs, dispatch and serve.
func (g *generator) stubDefs(p *printer) {
	if len(g.iface.Messages) == 0 {
		return
	}
	for _, m := range g.iface.Messages {
		fs := g.byMessage(m)
		var b body
		b.p.f("%s", proto("    ", "rc = chanos_conn_buf", []string{"c", "&b", upper(fs[0].cname) + "_MAX_FRAME_SIZE"}, ";"))
		if m.RPC {
			b.p.f("    if (rc == 0)")
			b.p.f("        rc = %s_encode(in, &b);", fs[0].cname)
			b.p.f("    if (rc == 0)")
			b.p.f("%s", proto("        ", "rc = chanos_conn_call_buf", []string{"c", "&b", "timeout_ms", "&f", "NULL", "NULL"}, ";"))
			// Also for a reply type without descriptors: a broken peer
			// may send some with it, and its decode then fails.
			b.p.f("    if (rc == 0) {")
			// b.fault is the connection's (chanos_conn_buf), as is
			// the encoder's: chanos_conn_fault then tells either.
			b.p.f("%s", proto("        ", "rc = "+fs[1].cname+"_decode_fault", []string{"out", "f.data", "f.len", "f.fds", "f.nfds",
				"b.fault"}, ";"))
			b.p.f("        if (rc != 0) /* the reply's descriptors go with it */")
			b.p.f("            chanos_frame_close_fds(&f);")
			b.p.f("    }")
			b.p.f("    return rc;")
			p.function(proto("", "int "+g.stubName(m), g.stubParams(m), ""),
				[]string{"struct chanos_buf b;", "struct chanos_frame f;", "int rc;"}, &b)
		} else {
			b.p.f("    if (rc == 0)")
			b.p.f("        rc = %s_encode(m, &b);", fs[0].cname)
			b.p.f("    if (rc == 0)")
			b.p.f("        rc = chanos_conn_send_buf(c, &b, timeout_ms);")
			b.p.f("    return rc;")
			p.function(proto("", "int "+g.stubName(m), g.stubParams(m), ""),
				[]string{"struct chanos_buf b;", "int rc;"}, &b)
		}
	}
	g.dispatchDef(p)
	var b body
	b.p.f("%s", proto("    ", "return chanos_serve", []string{"c", g.dispatchFunc(), "ops", "ctx", "timeout_ms"}, ";"))
	p.function(proto("", "int "+g.serveFunc(), []string{"chanos_conn *c", "const struct " + g.opsStruct() + " *ops",
		"void *ctx", "int timeout_ms"}, ""), nil, &b)
}

func (g *generator) dispatchDef(p *printer) {
	var b body
	b.p.f("%s", proto("    ", "rc = "+g.pfx+"_decode_fault", []string{"&m", "f->data", "f->len", "f->fds", "f->nfds",
		"chanos_conn_fault_(c)"}, ";"))
	b.p.f("    if (rc != 0)")
	b.p.f("        return chanos_serve_bad_(c, f, rc);")
	b.p.f("    switch (m.msg) {")
	for _, m := range g.iface.Messages {
		fs := g.byMessage(m)
		op := "ops->" + Member(m.Name)
		b.p.f("    case %s:", g.msgNumber(m))
		if !m.RPC {
			if fs[0].maxCaps == 0 {
				b.p.f("        return %s == NULL ? 0 : %s(ctx, c, &m.u.%s);", op, op, fs[0].member)
				continue
			}
			b.p.f("        if (%s != NULL)", op)
			b.p.f("            return %s(ctx, c, &m.u.%s);", op, fs[0].member)
			b.p.f("        chanos_frame_close_fds(f); /* nobody takes its descriptors */")
			b.p.f("        return 0;")
			continue
		}
		if fs[0].maxCaps > 0 || fs[1].maxCaps > 0 {
			b.p.f("        if (m.kind != CHANOS_KIND_CALL || %s == NULL)", op)
			b.p.f("            chanos_frame_close_fds(f); /* nobody takes its descriptors */")
		}
		b.p.f("        if (m.kind != CHANOS_KIND_CALL)")
		b.p.f("            return 0; /* a server takes calls only */")
		b.p.f("        if (%s == NULL)", op)
		b.p.f("            return chanos_serve_unimplemented_(c, f, \"%s.%s\");", g.iface.Name, m.Name)
		b.p.f("        memset(&r.%s, 0, sizeof r.%s);", fs[1].member, fs[1].member)
		b.p.f("        rc = %s(ctx, c, &m.u.%s, &r.%s);", op, fs[0].member, fs[1].member)
		b.p.f("        if (rc == 0)")
		b.p.f("%s", proto("            ", "rc = chanos_conn_buf", []string{"c", "&b", upper(fs[1].cname) + "_MAX_FRAME_SIZE"}, ";"))
		b.p.f("        if (rc == 0)")
		b.p.f("            rc = %s_encode(&r.%s, &b);", fs[1].cname, fs[1].member)
		b.p.f("        return chanos_serve_reply_(c, f, rc, &b);")
	}
	b.p.f("    }")
	b.p.f("    return 0;")
	locals := []string{"const struct " + g.opsStruct() + " *ops = ops_;", "struct " + g.pfx + "_msg m;"}
	if g.hasRPC {
		// The replies share one union, as the frames do in m.
		locals = append(locals, "union "+g.pfx+"_replies_ r;", "struct chanos_buf b = { 0 };")
	}
	locals = append(locals, "int rc;")
	if g.hasRPC {
		p.f("union %s_replies_ {", g.pfx)
		for _, m := range g.iface.Messages {
			if m.RPC {
				fs := g.byMessage(m)
				p.f("    struct %s %s;", fs[1].cname, fs[1].member)
			}
		}
		p.f("};")
		p.blank()
	}
	p.function(proto("", "int "+g.dispatchFunc(), []string{"chanos_conn *c", "const struct chanos_frame *f",
		"const void *ops_", "void *ctx"}, ""), locals, &b)
}

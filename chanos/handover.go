package chanos

import (
	"context"
	"errors"
	"fmt"

	"github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// ErrHandedOver is the error of a Listener whose export was handed over
// to another domain (HandOver): its Accept returns the connections it
// held, then this.
var ErrHandedOver = errors.New("chanos: the export was handed over to another domain")

// HandOver gives the export away, as L4 passes an IPC gate: it returns a
// grant, a one-time iref, which the domain that is to serve the export
// passes to Adopt. Send it in any message, as an iref; its token is not
// the export's, so it lets its holder take the export over once, not
// bind it. From the call on, this Listener accepts no more connections
// (Accept returns those it held, then ErrHandedOver); new binds wait for
// the adopter, and connections already made go on. Unadopted within a
// minute (monitor.HandOverTTL), the export is withdrawn. An export is
// adopted on its own machine (docs/capabilities.md, "Listeners").
func (l *Listener) HandOver(ctx context.Context) (wire.Iref, error) {
	ref := l.Ref()
	var reply monitor.HandOverReply
	if err := l.d.call(ctx, &monitor.HandOverCall{Export: ref.Export}, &reply); err != nil {
		return wire.Iref{}, fmt.Errorf("chanos: hand over %q: %w", l.name, err)
	}
	l.d.mu.Lock()
	if l.d.exports[ref.Export] == l {
		delete(l.d.exports, ref.Export)
	}
	l.d.mu.Unlock()
	l.stop(ErrHandedOver)
	return reply.Grant, nil
}

// Adopt takes over the export a HandOver grant names: this domain becomes
// its exporting domain and owner of its name, and the Listener returned
// accepts its connections, binds that waited for it included. iface must
// be the export's interface, of the same fingerprint. The Listener's Ref
// is the export's iref, token and all.
func Adopt(ctx context.Context, d *Domain, grant wire.Iref, iface Interface) (*Listener, error) {
	var reply monitor.AdoptReply
	if err := d.call(ctx, &monitor.AdoptCall{Grant: grant, Iface: iface.Name, Fingerprint: iface.Fingerprint}, &reply); err != nil {
		return nil, fmt.Errorf("chanos: adopt export %d: %w", grant.Export, err)
	}
	name := reply.Name
	var opts []ExportOption
	if reply.Private {
		// Exported again under this policy if the monitor restarts; the
		// allow-lists, which the monitor keeps, are not.
		opts = []ExportOption{Private()}
	}
	if name == "" {
		name = anonymousName(reply.Ref.Export)
	}
	l := &Listener{d: d, name: name, opts: opts, ref: reply.Ref, iface: iface, conns: make(chan *Conn, acceptQueue), stopC: make(chan struct{})}
	d.mu.Lock()
	if d.err != nil {
		err := d.err
		d.mu.Unlock()
		return nil, err
	}
	d.adoptUnlock(l, reply.Ref.Export)
	return l, nil
}

// anonymousName is what an export without a name is withdrawn by: "#ID",
// which no name can be (the monitor protocol's export).
func anonymousName(export uint64) string { return fmt.Sprintf("#%d", export) }

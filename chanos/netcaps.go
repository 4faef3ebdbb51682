package chanos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// Channel endpoints between machines (docs/capabilities.md, "Between
// machines"). A descriptor cannot cross machines, so an Endpoint sent on a
// net connection is re-bound: the sending domain opens the endpoint's end
// itself, exports it under no name, privately, and sends the export's iref
// (net's RefCap) in its place. The receiver's OpenEndpoint binds that
// iref, through the two machines' monitors, and gets a net connection to
// the sending domain, which relays each frame between it and the
// endpoint's ring: the connection works as the endpoint would have, one
// hop longer on the sender's machine.

// endpointExportTTL bounds how long an endpoint sent to another machine
// waits for its receiver to open it; unopened by then, it is withdrawn and
// its other end sees the peer gone.
const endpointExportTTL = time.Minute

// netCapsLink is a net link as the engine of a domain's connection sees
// it: the channel endpoints among a frame's capabilities travel as the
// irefs that re-bind them, and irefs received become remoteEndpoints.
type netCapsLink struct {
	*cnet.Link
	d *Domain
}

// SendFrame implements interconnect.Link.
func (l *netCapsLink) SendFrame(ctx context.Context, frame []byte, caps []wire.Cap) error {
	if len(caps) == 0 {
		return l.Link.SendFrame(ctx, frame, nil)
	}
	refs, undo, err := l.d.refsFor(ctx, caps)
	if err != nil {
		return err
	}
	if err := l.Link.SendFrame(ctx, frame, refs); err != nil {
		undo()
		return err
	}
	return nil
}

// TrySendFrame implements interconnect.Link. With endpoints among caps it
// makes a call to the monitor before it tries.
func (l *netCapsLink) TrySendFrame(frame []byte, caps []wire.Cap) (bool, error) {
	if len(caps) == 0 {
		return l.Link.TrySendFrame(frame, nil)
	}
	refs, undo, err := l.d.refsFor(context.Background(), caps)
	if err != nil {
		return false, err
	}
	ok, err := l.Link.TrySendFrame(frame, refs)
	if !ok || err != nil {
		undo()
	}
	return ok, err
}

// Receive implements interconnect.Link.
func (l *netCapsLink) Receive(ctx context.Context, in *interconnect.Incoming) error {
	if err := l.Link.Receive(ctx, in); err != nil {
		return err
	}
	for i, c := range in.Caps {
		if r, ok := c.(*cnet.RefCap); ok {
			in.Caps[i] = &remoteEndpoint{ref: r.Ref, d: l.d}
		}
	}
	return nil
}

// remoteEndpoint is an Endpoint that came from another machine: the iref
// of the export that re-binds it. OpenEndpoint binds it.
type remoteEndpoint struct {
	ref wire.Iref
	d   *Domain
}

// Close drops it unopened: the sender withdraws its export after
// endpointExportTTL.
func (*remoteEndpoint) Close() error { return nil }

// open binds the endpoint's export as a connection of iface; the export's
// monitor checks the interface and its fingerprint.
func (r *remoteEndpoint) open(iface Interface) (*Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.d.timeout)
	defer cancel()
	c, err := ConnectRef(ctx, r.d, r.ref, iface)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w: the endpoint from machine %016x was opened already, or dropped: %w", ErrEndpoint, r.ref.Machine, err)
		}
		return nil, err
	}
	return c, nil
}

// refsFor turns caps, a frame's capabilities bound for another machine,
// into the RefCaps that stand for them: an Endpoint is exported for
// re-binding, a remoteEndpoint passes on as it came. undo withdraws what
// was exported, for a frame that was not sent.
func (d *Domain) refsFor(ctx context.Context, caps []wire.Cap) (refs []wire.Cap, undo func(), err error) {
	var made []*endpointExport
	undo = func() {
		for _, e := range made {
			e.stop()
		}
	}
	refs = make([]wire.Cap, len(caps))
	for i, c := range caps {
		switch v := c.(type) {
		case *Endpoint:
			if v.remote != nil {
				refs[i] = &cnet.RefCap{Ref: v.remote.ref}
				continue
			}
			e, err := d.exportEndpoint(ctx, v)
			if err != nil {
				undo()
				return nil, nil, fmt.Errorf("chanos: capability %d for another machine: %w", i, err)
			}
			made = append(made, e)
			refs[i] = &cnet.RefCap{Ref: e.ref}
		case *remoteEndpoint:
			refs[i] = &cnet.RefCap{Ref: v.ref}
		default:
			undo()
			return nil, nil, fmt.Errorf("chanos: capability %d is a %T: a descriptor cannot be sent to another machine (channel endpoints can): %w", i, c, ErrCapsUnsupported)
		}
	}
	return refs, undo, nil
}

// endpointExport is an Endpoint of this domain's, exported for a domain
// of another machine to open.
type endpointExport struct {
	d     *Domain
	l     *Listener
	ref   wire.Iref
	far   interconnect.Link // the endpoint's end, opened here
	once  sync.Once
	timer *time.Timer
}

// exportEndpoint opens ep's end here and exports it, privately and
// without a name, until a domain binds it (once) or endpointExportTTL
// passes.
func (d *Domain) exportEndpoint(ctx context.Context, ep *Endpoint) (*endpointExport, error) {
	u, label, err := ump.OpenEndpoint(ep.f, &ump.Options{})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEndpoint, err)
	}
	iface, err := endpointInterface(label)
	if err != nil {
		u.Close()
		return nil, err
	}
	e := &endpointExport{d: d, far: ump.NewLink(u)}
	call, err := exportCall("", iface, []ExportOption{Private()})
	if err != nil {
		e.far.Close()
		return nil, err
	}
	var reply monitor.ExportReply
	if err := d.call(ctx, call, &reply); err != nil {
		e.far.Close()
		return nil, fmt.Errorf("chanos: export an endpoint of %s for another machine: %w", iface.Name, err)
	}
	e.ref = reply.Ref
	e.l = &Listener{d: d, name: anonymousName(reply.Ref.Export), iface: iface, conns: make(chan *Conn, 1), stopC: make(chan struct{}), ref: reply.Ref, relay: e.relay}
	d.mu.Lock()
	d.adoptUnlock(e.l, reply.Ref.Export)
	e.timer = time.AfterFunc(endpointExportTTL, func() {
		d.log.Debug("chanos: an endpoint sent to another machine was not opened in time; dropped", "export", reply.Ref.Export)
		e.stop()
	})
	return e, nil
}

// stop withdraws the export and, unless it was bound, closes the
// endpoint's end.
func (e *endpointExport) stop() {
	e.once.Do(func() {
		e.timer.Stop()
		e.l.Close()
		e.far.Close()
	})
}

// relay is the export's Listener's: the one connection that binds it is
// joined to the endpoint's end, frame for frame, in both directions, and
// the export is withdrawn.
func (e *endpointExport) relay(near interconnect.Link) {
	taken := false
	e.once.Do(func() {
		taken = true
		e.timer.Stop()
		go e.l.Close()
	})
	if !taken {
		near.Close()
		return
	}
	go relayLinks(e.far, near, e.d)
}

// relayLinks copies frames both ways between a and b until either ends,
// then closes both.
func relayLinks(a, b interconnect.Link, d *Domain) {
	var wg sync.WaitGroup
	wg.Add(2)
	pump := func(from, to interconnect.Link) {
		defer wg.Done()
		var in interconnect.Incoming
		for {
			if err := from.Receive(context.Background(), &in); err != nil {
				break
			}
			frame := in.Frame
			if in.Meta != nil {
				var err error
				if frame, err = wire.AppendMetadata(append([]byte(nil), in.Frame...), in.Meta); err != nil {
					wire.CloseCaps(in.Caps)
					break
				}
			}
			if err := to.SendFrame(context.Background(), frame, in.Caps); err != nil {
				wire.CloseCaps(in.Caps)
				d.log.Debug("chanos: relay of an endpoint between machines ended", "err", err)
				break
			}
		}
		from.Close()
		to.Close()
	}
	go pump(a, b)
	go pump(b, a)
	wg.Wait()
}

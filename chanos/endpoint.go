package chanos

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/chanos/chanos/chanos/internal/engine"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/wire"
)

// An Endpoint is one end of a fresh connection, as a capability: the
// typed channel endpoint of Zircon's channel_create and L4's IPC gates. A
// domain makes a connection of any interface with NewEndpoint, keeps one
// end and sends the Endpoint to another domain in a message (a
// give_away_cap), which opens it with OpenEndpoint and holds a working
// Conn of that interface: no monitor, no name. The interface's name and
// fingerprint travel with it and are checked on receipt.
//
// Send an Endpoint as a give_away_cap: the receiver's end must be the
// only one, as its end of file is how the sender learns that the receiver
// went away (docs/capabilities.md, "Channel endpoints").
type Endpoint struct {
	f      *os.File
	remote *remoteEndpoint // one that came from another machine: f is nil
}

// ErrEndpoint is matched by OpenEndpoint's errors: the capability is not
// an endpoint, was opened already, or is of another interface.
var ErrEndpoint = errors.New("chanos: not an endpoint of this interface")

// endpointMagic starts an endpoint's label: "CHANEP01".
const endpointMagic = 0x313050454e414843

// NewEndpoint makes a connection of iface between this domain and
// whichever domain will open the Endpoint: this side's Conn, over a fresh
// ump ring pair, and the Endpoint to send. Messages sent on the Conn wait
// in the ring until the other side opens it.
func NewEndpoint(iface Interface) (*Conn, *Endpoint, error) {
	label := binary.LittleEndian.AppendUint64(nil, endpointMagic)
	label = binary.LittleEndian.AppendUint64(label, iface.Fingerprint)
	label = binary.LittleEndian.AppendUint32(label, uint32(iface.MaxFrameSize))
	label = append(label, iface.Name...)
	u, ep, err := ump.NewEndpoint(&ump.Options{MaxMessageSize: iface.MaxFrameSize}, label)
	if err != nil {
		return nil, nil, fmt.Errorf("chanos: new endpoint of %s: %w", iface.Name, err)
	}
	return (*Conn)(engine.New(ump.NewLink(u), iface, nil)), &Endpoint{f: ep}, nil
}

// endpointInterface reads the interface an endpoint's label names (see
// NewEndpoint): its name, fingerprint and largest frame.
func endpointInterface(label []byte) (Interface, error) {
	le := binary.LittleEndian
	if len(label) < 20 || le.Uint64(label) != endpointMagic {
		return Interface{}, fmt.Errorf("%w: not made by NewEndpoint", ErrEndpoint)
	}
	return Interface{Name: string(label[20:]), Fingerprint: le.Uint64(label[8:]), MaxFrameSize: int(le.Uint32(label[16:]))}, nil
}

// Close drops the Endpoint unopened; the other side's Conn sees its peer
// gone.
func (e *Endpoint) Close() error {
	if e.remote != nil {
		return e.remote.Close()
	}
	return e.f.Close()
}

// SyscallConn gives the Endpoint's descriptor to the message that carries
// it. One that came from another machine has none: it can be sent on to
// another machine, or opened.
func (e *Endpoint) SyscallConn() (syscall.RawConn, error) {
	if e.remote != nil {
		return nil, fmt.Errorf("%w: an endpoint from another machine has no descriptor to pass on this machine", ErrCapsUnsupported)
	}
	return e.f.SyscallConn()
}

// EndpointFromCap is the conversion of a `give_away_cap(endpoint)`
// (docs/idl.md): the Endpoint a capability received in a message is, to
// open with OpenEndpoint. Its interface is checked when it is opened. A
// capability that cannot be an endpoint is closed and refused
// (ErrEndpoint).
func EndpointFromCap(c wire.Cap) (*Endpoint, error) {
	switch v := c.(type) {
	case *Endpoint:
		return v, nil
	case *os.File:
		return &Endpoint{f: v}, nil
	case *remoteEndpoint:
		return &Endpoint{remote: v}, nil
	}
	c.Close()
	return nil, fmt.Errorf("%w: a %T", ErrEndpoint, c)
}

// OpenEndpoint opens the Endpoint a capability received in a message
// carries (another domain's NewEndpoint), taking it over, and returns the
// connection of iface it leads to. An endpoint of another interface, or
// of the same name with another fingerprint, is refused (ErrEndpoint,
// ErrInterfaceMismatch) and closed, which the maker sees as its peer's
// going.
func OpenEndpoint(c wire.Cap, iface Interface) (*Conn, error) {
	var f *os.File
	switch v := c.(type) {
	case *remoteEndpoint: // from another machine: bind what re-binds it
		return v.open(iface)
	case *Endpoint: // within one process, the value itself; or typed
		if v.remote != nil {
			return v.remote.open(iface)
		}
		f = v.f
	case *os.File:
		f = v
	default:
		c.Close()
		return nil, fmt.Errorf("%w: a %T", ErrEndpoint, c)
	}
	u, label, err := ump.OpenEndpoint(f, &ump.Options{MaxMessageSize: iface.MaxFrameSize})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEndpoint, err)
	}
	made, err := endpointInterface(label)
	if err != nil {
		u.Close()
		return nil, err
	}
	fp, name := made.Fingerprint, made.Name
	switch {
	case name != iface.Name:
		u.Close()
		return nil, fmt.Errorf("%w: it leads to a connection of %s, not %s", ErrEndpoint, name, iface.Name)
	case fp != 0 && iface.Fingerprint != 0 && fp != iface.Fingerprint:
		u.Close()
		return nil, fmt.Errorf("%w: endpoint of %s: fingerprint %016x, ours %016x", ErrInterfaceMismatch, name, fp, iface.Fingerprint)
	}
	return (*Conn)(engine.New(ump.NewLink(u), iface, nil)), nil
}

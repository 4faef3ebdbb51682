package chanos

import "github.com/chanos/chanos/interconnect/ump"

// LocalPair returns both ends of a local connection, for tests.
func LocalPair(iface Interface) (*Conn, *Conn) {
	a, b := localPair()
	return newConn(a, iface, nil), newConn(b, iface, nil)
}

// UMPPair returns both ends of a ump connection within this process.
func UMPPair(iface Interface) (*Conn, *Conn, error) {
	a, b, err := ump.Pipe(&ump.Options{MaxMessageSize: iface.MaxFrameSize})
	if err != nil {
		return nil, nil, err
	}
	return NewConn(a, iface), NewConn(b, iface), nil
}

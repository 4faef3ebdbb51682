package net

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	stdnet "net"
	"sync"
	"time"
)

// ErrAuth is returned when a peer's certificate is not the one pinned
// for the connection, or a new connection's client certificate is not
// admitted.
var ErrAuth = errors.New("net: peer not authenticated")

// Identity is a connection's credential: a self-signed certificate on a
// fresh ECDSA P-256 key, made for one connection (and its resumes), and
// the SHA-256 fingerprint of the certificate's DER form, which the two
// machines' monitors hand each other's side over their own authenticated
// link (docs/net.md#security). It is never a machine's long-term key.
type Identity struct {
	Cert        tls.Certificate
	Fingerprint [32]byte
}

// NewIdentity makes a fresh Identity.
func NewIdentity() (*Identity, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("net: identity key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("net: identity serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("net: identity certificate: %w", err)
	}
	return &Identity{
		Cert:        tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		Fingerprint: sha256.Sum256(der),
	}, nil
}

// Marshal returns the identity's certificate (DER) and private key
// (PKCS#8, DER), for a monitor to hand the domain that will use it.
func (id *Identity) Marshal() (cert, key []byte, err error) {
	if len(id.Cert.Certificate) != 1 {
		return nil, nil, fmt.Errorf("net: identity: %d certificates, want 1", len(id.Cert.Certificate))
	}
	key, err = x509.MarshalPKCS8PrivateKey(id.Cert.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("net: identity key: %w", err)
	}
	return id.Cert.Certificate[0], key, nil
}

// ParseIdentity reads back what Marshal wrote, checking that the key is
// the certificate's.
func ParseIdentity(cert, key []byte) (*Identity, error) {
	c, err := x509.ParseCertificate(cert)
	if err != nil {
		return nil, fmt.Errorf("%w: identity certificate: %w", ErrAuth, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("%w: identity key: %w", ErrAuth, err)
	}
	pk, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: identity key: %T, want ECDSA", ErrAuth, k)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&pk.PublicKey) {
		return nil, fmt.Errorf("%w: identity: the key is not the certificate's", ErrAuth)
	}
	return &Identity{
		Cert:        tls.Certificate{Certificate: [][]byte{cert}, PrivateKey: pk},
		Fingerprint: sha256.Sum256(cert),
	}, nil
}

// TLS makes a link's TCP connections TLS 1.3 connections whose two
// certificates are pinned: each side presents its Identity and checks
// the peer's certificate against the fingerprint its monitor gave it. No
// certificate authority is involved.
type TLS struct {
	// Identity is this side's credential. On the accepting side it is
	// the one presented when Select is nil or returns nil.
	Identity *Identity
	// Peer, on the dialing side, is the fingerprint the accepting side's
	// certificate must have.
	Peer [32]byte
	// ServerName, on the dialing side, is the label the accepting side
	// selects its certificate by (TLS's server name indication): the one
	// its monitor gave it for this connection. Default "chanos". It is
	// sent in the clear, so it names a connection without granting it.
	ServerName string
	// Select, on the accepting side, returns the identity to present to
	// a client that asked for serverName, so that one listener serves
	// many connections with a certificate each. Nil, or a nil result,
	// presents Identity; with neither, the handshake fails.
	Select func(serverName string) *Identity
	// Admit, on the accepting side, says whether a new connection that
	// asked for serverName, with a client certificate of fingerprint fp,
	// may open (the monitors' grant of this one connection; it should
	// admit a fingerprint once). A resume must present the server name
	// and the certificate that opened the connection. Nil admits none.
	Admit func(serverName string, fp [32]byte) bool
	// AuthOnly turns encryption off and keeps authentication: the TLS
	// handshake and the hellos run as with encryption, then the records
	// travel in the clear on the TCP connection, each with an AES-256-GMAC
	// tag keyed from the TLS session (docs/net.md#without-encryption).
	// The peer can read the frames but cannot change, forge, replay,
	// reorder or drop one unnoticed. For trusted networks only. Both
	// sides must agree: a mismatch fails the handshake with ErrMode.
	AuthOnly bool
	// ModeOf, on the accepting side, says whether the connection asked
	// for under serverName is authenticated only, so that one listener
	// serves connections of both modes; nil takes AuthOnly for all.
	ModeOf func(serverName string) (authOnly bool)
}

// authOnlyFor is the mode the accepting side expects of a connection
// under serverName.
func (t *TLS) authOnlyFor(serverName string) bool {
	if t.ModeOf != nil {
		return t.ModeOf(serverName)
	}
	return t.AuthOnly
}

// ErrMode is returned when the two sides of a connection disagree on
// encryption: one runs TLS.AuthOnly and the other does not.
var ErrMode = errors.New("net: the peers disagree on encryption (TLS.AuthOnly)")

// The ALPN protocol names that carry the mode in the TLS handshake, so
// that the transcript, which both certificates sign, binds it.
const (
	alpnEncrypted = "chanos-net"
	alpnAuthOnly  = "chanos-net-auth"
)

// authLabel is the TLS exporter label of the authenticated-only mode's
// record keys (RFC 8446 section 7.5).
const authLabel = "EXPORTER-chanos-net-auth"

// defaultServerName is the server name a dialing side sends when it was
// given none.
const defaultServerName = "chanos"

// tlsConn is a TLS connection whose Close closes the TCP connection under
// it at once: a link closes a connection it takes for broken, and TLS's
// close_notify could wait on a peer that no longer reads.
type tlsConn struct {
	*tls.Conn
	raw  stdnet.Conn
	cork *corkConn // what the TLS connection writes to
	// authOnly: the hellos travel in TLS, then the records in the clear
	// on raw (the mode the handshake negotiated).
	authOnly bool
}

func (c *tlsConn) Close() error { return c.raw.Close() }

// Write writes p in TLS records that leave in one system call: crypto/tls
// writes each record, of at most 16 KiB, with a write of its own, and on
// two CPUs the three more system calls of a 64 KiB frame cost more than
// gathering the records (a copy).
func (c *tlsConn) Write(p []byte) (int, error) {
	c.cork.hold()
	n, err := c.Conn.Write(p)
	if ferr := c.cork.release(); err == nil {
		err = ferr
	}
	return n, err
}

// corkConn is the connection under a TLS one: while held, what crypto/tls
// writes is gathered, and it leaves when released (tlsConn.Write). Other
// writes (crypto/tls answering a post-handshake message while it reads)
// go straight through.
type corkConn struct {
	stdnet.Conn
	mu   sync.Mutex
	held bool
	buf  []byte
}

// maxCork bounds what a corkConn gathers before it writes: a frame of up
// to the maximum size passes through one TLS write.
const maxCork = 256 << 10

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		return c.Conn.Write(p)
	}
	if len(c.buf)+len(p) > maxCork {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

func (c *corkConn) hold() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

func (c *corkConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
	return c.flushLocked()
}

func (c *corkConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

func (t *TLS) config(pin *[32]byte, got *[32]byte) *tls.Config {
	name := t.ServerName
	if name == "" {
		name = defaultServerName
	}
	var certs []tls.Certificate
	if t.Identity != nil {
		certs = []tls.Certificate{t.Identity.Cert}
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       certs,
		ClientAuth:         tls.RequireAnyClientCert,
		InsecureSkipVerify: true, // the peer's certificate is pinned below, not chained to an authority
		ServerName:         name,
		// A post-handshake message after the accepting side's hello would
		// land among the clear records of the authenticated-only mode;
		// and every resume is a full handshake with both certificates.
		SessionTicketsDisabled: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) != 1 {
				return fmt.Errorf("%w: %d certificates", ErrAuth, len(raw))
			}
			fp := sha256.Sum256(raw[0])
			if pin != nil && fp != *pin {
				return fmt.Errorf("%w: the certificate is not the pinned one", ErrAuth)
			}
			*got = fp
			return nil
		},
	}
}

// client runs the dialing side's TLS handshake on c.
func (t *TLS) client(ctx context.Context, c stdnet.Conn) (stdnet.Conn, error) {
	var got [32]byte
	cfg := t.config(&t.Peer, &got)
	want := alpnEncrypted
	var tr stdnet.Conn = c
	if t.AuthOnly {
		// TLS reads the handshake and the peer's hello record by record,
		// so that the first clear record after the hello is still in the
		// socket at the switch.
		want = alpnAuthOnly
		tr = &recordReader{Conn: c}
	}
	cfg.NextProtos = []string{want}
	cork := &corkConn{Conn: tr}
	tc := tls.Client(cork, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("net: tls: %w", err)
	}
	// An accepting side that knows no modes selects no protocol, and
	// encrypts.
	if got := tc.ConnectionState().NegotiatedProtocol; got != want && (t.AuthOnly || got != "") {
		c.Close()
		return nil, fmt.Errorf("%w: asked for %q, the peer chose %q", ErrMode, want, got)
	}
	return &tlsConn{Conn: tc, raw: c, cork: cork, authOnly: t.AuthOnly}, nil
}

// server runs the accepting side's TLS handshake on c, and returns the
// server name the client asked for and its certificate's fingerprint.
func (t *TLS) server(ctx context.Context, c stdnet.Conn) (stdnet.Conn, string, [32]byte, error) {
	var got [32]byte
	cfg := t.config(nil, &got)
	cfg.GetCertificate = func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if t.Select != nil {
			if id := t.Select(h.ServerName); id != nil {
				return &id.Cert, nil
			}
		}
		if t.Identity != nil {
			return &t.Identity.Cert, nil
		}
		return nil, fmt.Errorf("%w: no certificate for server name %q", ErrAuth, h.ServerName)
	}
	cfg.Certificates = nil
	// Both modes are offered, so that a client of the other mode reaches
	// the hello and is refused with a reject that says why.
	cfg.NextProtos = []string{alpnEncrypted, alpnAuthOnly}
	cork := &corkConn{Conn: c}
	tc := tls.Server(cork, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, "", got, fmt.Errorf("net: tls: %w", err)
	}
	st := tc.ConnectionState()
	return &tlsConn{Conn: tc, raw: c, cork: cork, authOnly: st.NegotiatedProtocol == alpnAuthOnly}, st.ServerName, got, nil
}

// recordReader reads a TCP connection for crypto/tls one TLS record at a
// time (its 5-byte header, then its body), never past the record's end.
// crypto/tls reads ahead otherwise, and in the authenticated-only mode the
// bytes after the accepting side's hello are clear records that the link,
// not TLS, must read.
type recordReader struct {
	stdnet.Conn
	hdr    [5]byte
	inHdr  int // header bytes read of the current record
	inBody int // body bytes left of the current record
}

func (r *recordReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.inHdr < len(r.hdr) {
		n, err := r.Conn.Read(p[:min(len(p), len(r.hdr)-r.inHdr)])
		copy(r.hdr[r.inHdr:], p[:n])
		r.inHdr += n
		if r.inHdr == len(r.hdr) {
			r.inBody = int(binary.BigEndian.Uint16(r.hdr[3:]))
			if r.inBody == 0 {
				r.inHdr = 0
			}
		}
		return n, err
	}
	n, err := r.Conn.Read(p[:min(len(p), r.inBody)])
	r.inBody -= n
	if r.inBody == 0 {
		r.inHdr = 0
	}
	return n, err
}

// plainAfterHellos returns, in the authenticated-only mode, the TCP
// connection under c with a reader for the clear records that follow the
// hellos, and the GMACs of this side's records and of the peer's. br is
// what read the peer's hello from c: it must hold nothing more, for the
// peer sends nothing in TLS after its hello. dialer says which side this
// is, and so which of the two exported keys is its own.
func plainAfterHellos(c *tlsConn, br *bufio.Reader, dialer bool) (stdnet.Conn, *bufio.Reader, *recordMAC, *recordMAC, error) {
	if br.Buffered() != 0 {
		return nil, nil, nil, nil, errors.New("TLS data after the peer's hello")
	}
	st := c.ConnectionState()
	ekm, err := st.ExportKeyingMaterial(authLabel, nil, 2*macKeySize)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("net: exporting the record keys: %w", err)
	}
	dk, ak := ekm[:macKeySize], ekm[macKeySize:]
	if !dialer {
		dk, ak = ak, dk
	}
	mine, err := newRecordMAC(dk)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	peer, err := newRecordMAC(ak)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	br.Reset(c.raw)
	return c.raw, br, mine, peer, nil
}

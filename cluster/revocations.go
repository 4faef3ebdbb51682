package cluster

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// ErrStaleRevocations: a revocation list older (by its CRL number) than
// the one already held, or as old but different. Taking it would let
// whoever replays an old list undo a revocation.
var ErrStaleRevocations = errors.New("revocation list is older than the one held")

// ErrBadRevocations: a revocation list that does not parse, or that the
// cluster's root did not sign.
var ErrBadRevocations = errors.New("revocation list not signed by the cluster root")

// Revocations is the revocation list a machine checks its peers against.
// The control link consults it on every handshake, and re-checks its open
// links' peers whenever it changes; Update replaces it at run time with a
// newer list signed by the root (from a file, or from etcd). The zero
// list, before any Update, revokes nothing. It is safe for concurrent use.
type Revocations struct {
	root *x509.Certificate

	mu      sync.RWMutex
	der     []byte
	number  *big.Int
	revoked map[string]time.Time // serial (decimal) -> revocation time
	changed chan struct{}        // closed and replaced by each Update that changes the list
}

// NewRevocations returns an empty list that accepts updates signed by
// root.
func NewRevocations(root *x509.Certificate) *Revocations {
	return &Revocations{root: root, changed: make(chan struct{})}
}

// ParseRevocations checks that list (an X.509 CRL, in PEM or DER) is
// signed by root and returns it.
func ParseRevocations(list []byte, root *x509.Certificate) (*x509.RevocationList, error) {
	der, err := crlDER(list)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRevocations, err)
	}
	rl, err := x509.ParseRevocationList(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRevocations, err)
	}
	if err := rl.CheckSignatureFrom(root); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRevocations, err)
	}
	if rl.Number == nil {
		return nil, fmt.Errorf("%w: it has no CRL number", ErrBadRevocations)
	}
	return rl, nil
}

// Update replaces the list with list (an X.509 CRL, in PEM or DER), after
// checking that the root signed it and that it is not older than the list
// held (ErrStaleRevocations). Giving the list held again changes nothing.
// Links whose peer the new list revokes are closed.
func (r *Revocations) Update(list []byte) error {
	rl, err := ParseRevocations(list, r.root)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.number != nil {
		switch c := rl.Number.Cmp(r.number); {
		case c < 0:
			return fmt.Errorf("%w: number %v, and the list held is number %v", ErrStaleRevocations, rl.Number, r.number)
		case c == 0 && bytes.Equal(rl.Raw, r.der):
			return nil
		case c == 0:
			return fmt.Errorf("%w: number %v is the held list's, with other contents", ErrStaleRevocations, rl.Number)
		}
	}
	revoked := make(map[string]time.Time, len(rl.RevokedCertificateEntries))
	for _, e := range rl.RevokedCertificateEntries {
		revoked[e.SerialNumber.String()] = e.RevocationTime
	}
	r.der, r.number, r.revoked = rl.Raw, rl.Number, revoked
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

// Check returns an error that matches ErrRevoked if the list revokes
// cert, nil otherwise.
func (r *Revocations) Check(cert *x509.Certificate) error {
	r.mu.RLock()
	at, ok := r.revoked[cert.SerialNumber.String()]
	r.mu.RUnlock()
	if ok {
		return fmt.Errorf("%w: credential %s of %q, revoked at %s", ErrRevoked, SerialString(cert.SerialNumber),
			cert.Subject.CommonName, at.UTC().Format(time.RFC3339))
	}
	return nil
}

// Number returns the held list's CRL number, nil before the first Update.
func (r *Revocations) Number() *big.Int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.number == nil {
		return nil
	}
	return new(big.Int).Set(r.number)
}

// Serials returns the serials the held list revokes (SerialString), in
// no particular order.
func (r *Revocations) Serials() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.revoked))
	for s := range r.revoked {
		n, _ := new(big.Int).SetString(s, 10)
		out = append(out, SerialString(n))
	}
	return out
}

// Bytes returns the held list in DER, nil before the first Update: what
// a machine passes on to others (etcd).
func (r *Revocations) Bytes() []byte {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.der
}

// Changed returns a channel that is closed at the next Update that
// changes the list.
func (r *Revocations) Changed() <-chan struct{} {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.changed
}

package cluster

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/chanos/chanos/internal/rundir"
)

// Default lifetimes.
const (
	// DefaultRootValidity is how long a root made by InitRoot is valid.
	DefaultRootValidity = 10 * 365 * 24 * time.Hour
	// DefaultCredentialValidity is how long a credential Admit issues is
	// valid when the admin names no other span.
	DefaultCredentialValidity = 365 * 24 * time.Hour
)

// machineOU marks the certificates this package issues to machines, and
// rootCN names a cluster root.
const (
	machineOU = "chanos machine"
	rootCN    = "chanos cluster root"
)

// Errors of the root and of admission, matchable with errors.Is.
var (
	// ErrBadName: a cluster or machine name that is empty, too long, or
	// has characters other than letters, digits, '.', '_' and '-'.
	ErrBadName = errors.New("bad name")
	// ErrRootExists: InitRoot found a root already in the directory.
	ErrRootExists = errors.New("a cluster root already exists there")
	// ErrNotRoot: a directory, or a certificate, that is not a cluster
	// root made by InitRoot.
	ErrNotRoot = errors.New("not a cluster root")
	// ErrBadRequest: a request to admit whose signature does not hold, or
	// a key that is not an Ed25519 public key.
	ErrBadRequest = errors.New("bad admission request")
	// ErrUnknownSerial: Revoke was given a serial or machine name the root
	// never issued.
	ErrUnknownSerial = errors.New("no such credential")
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CheckName checks a cluster or machine name: 1 to 63 letters, digits,
// '.', '_' or '-', starting with a letter or digit. Names appear in
// certificates, logs and file names, so they are kept plain.
func CheckName(kind, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%s name %q: %w: want 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", kind, name, ErrBadName)
	}
	return nil
}

// Root is a cluster's trust root: the CA key that admits and revokes
// machines, and its self-signed certificate, which names the cluster.
type Root struct {
	dir  string
	key  ed25519.PrivateKey
	cert *x509.Certificate
}

// InitRoot makes a new cluster root named cluster in dir, which it
// creates with mode 0700 if it is missing: RootKeyFile (0600), the
// certificate RootCertName, valid for validity (DefaultRootValidity if
// 0), an empty revocation list and the IssuedDir. It refuses a directory
// that already holds a root.
func InitRoot(dir, cluster string, validity time.Duration) (*Root, error) {
	if err := CheckName("cluster", cluster); err != nil {
		return nil, err
	}
	if validity <= 0 {
		validity = DefaultRootValidity
	}
	if err := rundir.Ensure(dir); err != nil {
		return nil, fmt.Errorf("root directory: %w", err)
	}
	keyPath := filepath.Join(dir, RootKeyFile)
	if ok, err := exists(keyPath); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("%s: %w", dir, ErrRootExists)
		}
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, IssuedDir), 0o700); err != nil {
		return nil, err
	}
	key, err := createPrivateKey(keyPath)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s: %w", dir, ErrRootExists)
	}
	if err != nil {
		return nil, fmt.Errorf("root key: %w", err)
	}
	pub := key.Public().(ed25519.PublicKey)
	now := time.Now()
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: rootCN, Organization: []string{cluster}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          keyID(pub)[:20],
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("root certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := writeReplace(filepath.Join(dir, RootCertName), certPEM(cert), 0o644); err != nil {
		return nil, err
	}
	r := &Root{dir: dir, key: key, cert: cert}
	if _, err := r.signRevocations(nil, big.NewInt(1)); err != nil {
		return nil, err
	}
	return r, nil
}

// LoadRoot reads the cluster root in dir.
func LoadRoot(dir string) (*Root, error) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if err := rundir.Check(dir); err != nil {
		return nil, fmt.Errorf("root directory: %w", err)
	}
	key, err := readPrivateKey(filepath.Join(dir, RootKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w: no %s ('chanos cluster init' makes one)", dir, ErrNotRoot, RootKeyFile)
	}
	if err != nil {
		return nil, err
	}
	cert, err := readCertFile(filepath.Join(dir, RootCertName))
	if err != nil {
		return nil, err
	}
	if _, err := rootCluster(cert); err != nil {
		return nil, err
	}
	if !key.Public().(ed25519.PublicKey).Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%s: %w: %s does not match %s", dir, ErrNotRoot, RootKeyFile, RootCertName)
	}
	return &Root{dir: dir, key: key, cert: cert}, nil
}

// rootCluster checks that cert is a cluster root and returns its
// cluster's name.
func rootCluster(cert *x509.Certificate) (string, error) {
	if !cert.IsCA || cert.Subject.CommonName != rootCN || len(cert.Subject.Organization) != 1 {
		return "", fmt.Errorf("certificate %q: %w", cert.Subject, ErrNotRoot)
	}
	if _, ok := cert.PublicKey.(ed25519.PublicKey); !ok {
		return "", fmt.Errorf("certificate %q: %w: its key is not Ed25519", cert.Subject, ErrNotRoot)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		return "", fmt.Errorf("certificate %q: %w: not self-signed: %v", cert.Subject, ErrNotRoot, err)
	}
	name := cert.Subject.Organization[0]
	if err := CheckName("cluster", name); err != nil {
		return "", err
	}
	return name, nil
}

// Cluster returns the cluster's name.
func (r *Root) Cluster() string { return r.cert.Subject.Organization[0] }

// Certificate returns the root's certificate.
func (r *Root) Certificate() *x509.Certificate { return r.cert }

// Dir returns the root's directory.
func (r *Root) Dir() string { return r.dir }

// Admit issues a credential to the machine whose public key is pub, under
// the human name machine: a certificate signed by the root that names the
// cluster (Organization) and the machine (CommonName), with a random
// serial, valid from notBefore to notAfter. It keeps a copy in the root's
// IssuedDir, and returns the credential.
func (r *Root) Admit(pub ed25519.PublicKey, machine string, notBefore, notAfter time.Time) (*x509.Certificate, error) {
	if err := CheckName("machine", machine); err != nil {
		return nil, err
	}
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: public key of %d bytes", ErrBadRequest, len(pub))
	}
	if !notAfter.After(notBefore) {
		return nil, fmt.Errorf("admit %s: the credential would expire (%v) before it is valid (%v)", machine, notAfter, notBefore)
	}
	if notAfter.After(r.cert.NotAfter) {
		notAfter = r.cert.NotAfter
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{CommonName: machine, Organization: []string{r.Cluster()},
			OrganizationalUnit: []string{machineOU}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		SubjectKeyId:          keyID(pub)[:20],
		AuthorityKeyId:        r.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, r.cert, pub, r.key)
	if err != nil {
		return nil, fmt.Errorf("admit %s: %w", machine, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(r.dir, IssuedDir), 0o700); err != nil {
		return nil, err
	}
	if err := writeNew(filepath.Join(r.dir, IssuedDir, SerialString(serial)+".crt"), certPEM(cert), 0o644); err != nil {
		return nil, fmt.Errorf("admit %s: keep a copy: %w", machine, err)
	}
	return cert, nil
}

// Bundle returns what Admit's caller hands to the machine: the credential
// and the root's certificate, in PEM, in that order (Join reads it).
func (r *Root) Bundle(cred *x509.Certificate) []byte {
	return append(certPEM(cred), certPEM(r.cert)...)
}

// Issued returns the credentials the root issued, oldest first.
func (r *Root) Issued() ([]*x509.Certificate, error) {
	ents, err := os.ReadDir(filepath.Join(r.dir, IssuedDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".crt") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		c, err := readCertFile(filepath.Join(r.dir, IssuedDir, e.Name()))
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	sort.Slice(certs, func(i, j int) bool { return certs[i].NotBefore.Before(certs[j].NotBefore) })
	return certs, nil
}

// RevocationList returns the latest revocation list the root signed, in
// DER (Revocations.Update takes it).
func (r *Root) RevocationList() ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(r.dir, RootRevocationsFile))
	if err != nil {
		return nil, err
	}
	der, err := crlDER(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", RootRevocationsFile, err)
	}
	return der, nil
}

// Revoke adds the credentials with the given serials to the root's
// revocation list, signs the new list (its number one higher), stores it
// and returns it in DER. With no serials it signs the same entries again,
// with a new date. Serials already revoked are kept once.
func (r *Root) Revoke(serials ...*big.Int) ([]byte, error) {
	old, err := r.RevocationList()
	if err != nil {
		return nil, err
	}
	list, err := x509.ParseRevocationList(old)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", RootRevocationsFile, ErrBadFile, err)
	}
	entries := list.RevokedCertificateEntries
	have := map[string]bool{}
	for _, e := range entries {
		have[e.SerialNumber.String()] = true
	}
	now := time.Now()
	for _, s := range serials {
		if have[s.String()] {
			continue
		}
		have[s.String()] = true
		entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: now})
	}
	return r.signRevocations(entries, new(big.Int).Add(list.Number, big.NewInt(1)))
}

// SerialsOf returns the serials of the credentials the root issued to
// machine, ErrUnknownSerial if none.
func (r *Root) SerialsOf(machine string) ([]*big.Int, error) {
	certs, err := r.Issued()
	if err != nil {
		return nil, err
	}
	var out []*big.Int
	for _, c := range certs {
		if c.Subject.CommonName == machine {
			out = append(out, c.SerialNumber)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("machine %q: %w", machine, ErrUnknownSerial)
	}
	return out, nil
}

// signRevocations signs a list of entries with the given number, stores
// it in RootRevocationsFile and returns it in DER. The list names its
// next update as the root's expiry: machines do not refuse a list for
// being old (docs/cluster.md says why), only one older than the
// list they hold.
func (r *Root) signRevocations(entries []x509.RevocationListEntry, number *big.Int) ([]byte, error) {
	now := time.Now()
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:                    number,
		ThisUpdate:                now,
		NextUpdate:                r.cert.NotAfter,
		RevokedCertificateEntries: entries,
	}, r.cert, crypto.Signer(r.key))
	if err != nil {
		return nil, fmt.Errorf("sign the revocation list: %w", err)
	}
	if err := writeReplace(filepath.Join(r.dir, RootRevocationsFile), CRLPEM(der), 0o644); err != nil {
		return nil, err
	}
	return der, nil
}

// CRLPEM returns a revocation list in PEM.
func CRLPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemCRL, Bytes: der})
}

// crlDER returns the DER of a revocation list given in PEM or DER.
func crlDER(b []byte) ([]byte, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != pemCRL {
			return nil, fmt.Errorf("%w: a %q PEM block, not %q", ErrBadFile, blk.Type, pemCRL)
		}
		return blk.Bytes, nil
	}
	return b, nil
}

// newSerial returns a random positive 128-bit serial number.
func newSerial() (*big.Int, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	b[0] &= 0x7f
	b[0] |= 0x40 // full length, so every serial prints with 32 digits
	return new(big.Int).SetBytes(b), nil
}

// SerialString formats a credential's serial as lower-case hex, the form
// the CLI and the logs use.
func SerialString(s *big.Int) string { return hex.EncodeToString(s.Bytes()) }

// ParseSerial parses a serial in SerialString's form.
func ParseSerial(s string) (*big.Int, error) {
	b, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(s), "0x"))
	if err != nil || len(b) == 0 || len(b) > 20 {
		return nil, fmt.Errorf("serial %q: %w: want up to 40 hex digits", s, ErrUnknownSerial)
	}
	return new(big.Int).SetBytes(b), nil
}

// keyID returns the SHA-256 of an Ed25519 public key.
func keyID(pub ed25519.PublicKey) []byte {
	h := sha256.Sum256(pub)
	return h[:]
}

// KeyID returns the id of a machine's key: the first 16 bytes of the
// SHA-256 of its Ed25519 public key, in hex. It names a machine
// independently of its human name and of its credentials.
func KeyID(pub ed25519.PublicKey) string { return hex.EncodeToString(keyID(pub)[:16]) }

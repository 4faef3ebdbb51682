package cluster

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/chanos/chanos/internal/rundir"
)

// ErrNotJoined: the machine holds no credential of a cluster (no
// CredentialFile or RootCertFile in its monitor's directory).
var ErrNotJoined = errors.New("machine has not joined a cluster")

// ErrCredential: a credential that Join or LoadIdentity cannot use: not
// issued by the root given with it, not for this machine's key, not a
// machine credential, or expired.
var ErrCredential = errors.New("unusable credential")

// LoadOrCreateKey returns the machine's private key from its monitor's
// directory dir, making it on first use (KeyFile, mode 0600). dir must be
// a private directory of this user (monitor.PrepareDir makes one). A key
// file that others could read, that is not a regular file, or that does
// not hold an Ed25519 key is an error (ErrKeyPermissions, ErrKeyCorrupt):
// it is never replaced, as that would silently change the machine's
// identity.
func LoadOrCreateKey(dir string) (ed25519.PrivateKey, error) {
	k, err := LoadKey(dir)
	if !errors.Is(err, ErrNoKey) {
		return k, err
	}
	k, err = createPrivateKey(filepath.Join(dir, KeyFile))
	if errors.Is(err, fs.ErrExist) {
		return LoadKey(dir) // another process made it meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("machine key: %w", err)
	}
	return k, nil
}

// LoadKey returns the machine's private key from its monitor's directory
// dir, ErrNoKey if there is none.
func LoadKey(dir string) (ed25519.PrivateKey, error) {
	if err := rundir.Check(dir); err != nil {
		return nil, fmt.Errorf("monitor directory: %w", err)
	}
	path := filepath.Join(dir, KeyFile)
	k, err := readPrivateKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoKey)
	}
	if err != nil {
		return nil, fmt.Errorf("machine key: %w", err)
	}
	return k, nil
}

// PublicKeyPEM returns pub as a PEM "PUBLIC KEY" block (PKIX), the form
// 'chanos cluster show' prints and Root.Admit's callers read back with
// ParseAdmitRequest.
func PublicKeyPEM(pub ed25519.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub) // cannot fail for an Ed25519 key
	return pem.EncodeToMemory(&pem.Block{Type: pemPublicKey, Bytes: der})
}

// Request returns a request to admit the machine whose key is key: a PEM
// certificate request (PKCS#10) signed by the key, which proves to the
// admin that whoever made it holds the key. name is the machine name it
// suggests; the admin chooses the name that counts.
func Request(key ed25519.PrivateKey, name string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: name, OrganizationalUnit: []string{machineOU}},
	}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemRequest, Bytes: der}), nil
}

// ParseAdmitRequest reads what a machine gave the admin to be admitted:
// a PEM "PUBLIC KEY" (an Ed25519 key) or a PEM "CERTIFICATE REQUEST"
// (Request's), whose signature it checks. It returns the key and, for a
// request, the name it suggests.
func ParseAdmitRequest(b []byte) (pub ed25519.PublicKey, suggested string, err error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, "", fmt.Errorf("%w: no PEM block", ErrBadRequest)
	}
	var k any
	switch blk.Type {
	case pemPublicKey:
		k, err = x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
	case pemRequest:
		req, err := x509.ParseCertificateRequest(blk.Bytes)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		if err := req.CheckSignature(); err != nil {
			return nil, "", fmt.Errorf("%w: its signature does not hold: %v", ErrBadRequest, err)
		}
		k, suggested = req.PublicKey, req.Subject.CommonName
	default:
		return nil, "", fmt.Errorf("%w: a %q PEM block, want %q or %q", ErrBadRequest, blk.Type, pemPublicKey, pemRequest)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, "", fmt.Errorf("%w: a %T key, want Ed25519", ErrBadRequest, k)
	}
	return pub, suggested, nil
}

// Join installs a machine credential in the monitor's directory dir:
// bundle holds the credential and, unless pinnedRoot is given, the cluster
// root's certificate (Root.Bundle's form). It checks that the credential
// is for this machine's key (which must exist: LoadOrCreateKey), that the
// root issued it and that it has not expired, then writes CredentialFile
// and RootCertFile. Joining another cluster's root replaces the previous
// one, and drops its revocation list. It returns the identity it
// installed.
func Join(dir string, bundle []byte, pinnedRoot *x509.Certificate) (*Identity, error) {
	key, err := LoadKey(dir)
	if err != nil {
		return nil, err
	}
	certs, err := parseCertsPEM(bundle)
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	var cred, root *x509.Certificate
	for _, c := range certs {
		switch {
		case c.IsCA && root == nil:
			root = c
		case !c.IsCA && cred == nil:
			cred = c
		default:
			return nil, fmt.Errorf("credential: %w: more than one credential or root", ErrBadFile)
		}
	}
	if cred == nil {
		return nil, fmt.Errorf("credential: %w: no machine credential in it", ErrBadFile)
	}
	if pinnedRoot != nil {
		if root != nil && !root.Equal(pinnedRoot) {
			return nil, fmt.Errorf("%w: it comes with another root than the one given", ErrCredential)
		}
		root = pinnedRoot
	}
	if root == nil {
		return nil, fmt.Errorf("credential: %w: no root certificate with it, and none given", ErrBadFile)
	}
	id, err := newIdentity(key, cred, root, time.Now())
	if err != nil {
		return nil, err
	}
	oldRoot, err := readCertFile(filepath.Join(dir, RootCertFile))
	if err == nil && !oldRoot.Equal(root) {
		if err := os.Remove(filepath.Join(dir, RevocationsFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	// The root first: a credential that is found beside the wrong root
	// fails to load rather than being trusted on another root's word.
	if err := writeReplace(filepath.Join(dir, RootCertFile), certPEM(root), 0o644); err != nil {
		return nil, err
	}
	if err := writeReplace(filepath.Join(dir, CredentialFile), certPEM(cred), 0o644); err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, RevocationsFile)); err == nil {
		if err := id.Revocations.Update(b); err != nil {
			return nil, fmt.Errorf("%s: %w", RevocationsFile, err)
		}
	}
	return id, nil
}

// InstallRevocations checks a revocation list (PEM or DER) against the
// root the machine in dir joined, and stores it as the machine's
// RevocationsFile, unless the machine holds a newer one
// (ErrStaleRevocations). A running monitor loads it on its next start or
// when told to (Revocations.Update).
func InstallRevocations(dir string, list []byte) error {
	id, err := LoadIdentity(dir)
	if err != nil && !errors.Is(err, ErrCredential) {
		return err
	}
	if id == nil {
		// An expired or revoked credential still lets the machine learn the
		// root's list: read the root alone.
		root, rerr := readCertFile(filepath.Join(dir, RootCertFile))
		if rerr != nil {
			return err
		}
		id = &Identity{root: root, Revocations: NewRevocations(root)}
		if b, rerr := os.ReadFile(filepath.Join(dir, RevocationsFile)); rerr == nil {
			_ = id.Revocations.Update(b) // a corrupt old list does not block a new one
		}
	}
	if err := id.Revocations.Update(list); err != nil {
		return err
	}
	der, err := crlDER(list)
	if err != nil {
		return err
	}
	return writeReplace(filepath.Join(dir, RevocationsFile), CRLPEM(der), 0o644)
}

// Identity is a machine's identity as its monitor holds it: its key, its
// credential and the root that issued it, and the revocation list it
// checks its peers against. Only the monitor process has one; the key
// never leaves it.
type Identity struct {
	cluster string
	machine string
	key     ed25519.PrivateKey
	cert    *x509.Certificate
	root    *x509.Certificate
	// Revocations is the list the control link checks every peer against,
	// at each handshake and whenever it changes. Replace its contents with
	// Revocations.Update.
	Revocations *Revocations
}

// LoadIdentity reads the machine's identity from its monitor's directory
// dir: KeyFile, CredentialFile, RootCertFile and, if present,
// RevocationsFile. It fails with ErrNotJoined when the machine holds no
// credential, and with ErrCredential when its credential does not match
// its key or root, or has expired.
func LoadIdentity(dir string) (*Identity, error) {
	key, err := LoadKey(dir)
	if err != nil {
		return nil, err
	}
	root, err := readCertFile(filepath.Join(dir, RootCertFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w ('chanos cluster join' installs a credential)", dir, ErrNotJoined)
	}
	if err != nil {
		return nil, err
	}
	cred, err := readCertFile(filepath.Join(dir, CredentialFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w ('chanos cluster join' installs a credential)", dir, ErrNotJoined)
	}
	if err != nil {
		return nil, err
	}
	id, err := newIdentity(key, cred, root, time.Now())
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, RevocationsFile))
	switch {
	case err == nil:
		if err := id.Revocations.Update(b); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, RevocationsFile), err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	return id, nil
}

// NewIdentity returns the identity of the machine whose key is key, with
// the credential cred issued by root (an empty revocation list): what
// LoadIdentity builds from files, for a caller that keeps them elsewhere.
func NewIdentity(key ed25519.PrivateKey, cred, root *x509.Certificate) (*Identity, error) {
	return newIdentity(key, cred, root, time.Now())
}

func newIdentity(key ed25519.PrivateKey, cred, root *x509.Certificate, now time.Time) (*Identity, error) {
	cluster, err := rootCluster(root)
	if err != nil {
		return nil, err
	}
	if !key.Public().(ed25519.PublicKey).Equal(cred.PublicKey) {
		return nil, fmt.Errorf("%w: credential %s is for another key than this machine's (key id %s)",
			ErrCredential, SerialString(cred.SerialNumber), KeyID(key.Public().(ed25519.PublicKey)))
	}
	info, err := verifyChain(cred, root, cluster, now)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCredential, err)
	}
	return &Identity{cluster: cluster, machine: info.Machine, key: key, cert: cred, root: root,
		Revocations: NewRevocations(root)}, nil
}

// Cluster returns the name of the cluster the machine joined.
func (id *Identity) Cluster() string { return id.cluster }

// Machine returns the machine's name, as its credential gives it.
func (id *Identity) Machine() string { return id.machine }

// Certificate returns the machine's credential.
func (id *Identity) Certificate() *x509.Certificate { return id.cert }

// Root returns the certificate of the cluster's root.
func (id *Identity) Root() *x509.Certificate { return id.root }

// PublicKey returns the machine's public key.
func (id *Identity) PublicKey() ed25519.PublicKey { return id.key.Public().(ed25519.PublicKey) }

// KeyID returns the id of the machine's key (KeyID).
func (id *Identity) KeyID() string { return KeyID(id.PublicKey()) }

// Peer is what the control link knows of the machine at its other end
// once the handshake has checked it.
type Peer struct {
	Cluster string // the cluster's name
	Machine string // the machine's name, as its credential gives it
	// KeyID names the machine's key (KeyID): stable across credentials.
	KeyID    string
	Serial   string    // the credential's serial (SerialString)
	NotAfter time.Time // when the credential expires
	// Certificate is the credential itself.
	Certificate *x509.Certificate
}

// verifyChain checks that cred is a machine credential of cluster issued
// by root and valid at now, and describes it.
func verifyChain(cred, root *x509.Certificate, cluster string, now time.Time) (Peer, error) {
	pub, ok := cred.PublicKey.(ed25519.PublicKey)
	if !ok {
		return Peer{}, fmt.Errorf("%w: its key is a %T, not Ed25519", ErrBadCertificate, cred.PublicKey)
	}
	claimed := ""
	if len(cred.Subject.Organization) == 1 {
		claimed = cred.Subject.Organization[0]
	}
	pool := x509.NewCertPool()
	pool.AddCert(root)
	_, err := cred.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}})
	var inv x509.CertificateInvalidError
	var unk x509.UnknownAuthorityError
	switch {
	case err == nil:
	case errors.As(err, &unk) || (errors.As(err, &inv) && inv.Reason == x509.NotAuthorizedToSign):
		if claimed != cluster {
			return Peer{}, fmt.Errorf("%w: it names cluster %q, not %q, and is not from this cluster's root", ErrWrongCluster, claimed, cluster)
		}
		return Peer{}, fmt.Errorf("%w: %q of cluster %q is not signed by this cluster's root (%v)", ErrUnknownRoot, cred.Subject.CommonName, claimed, err)
	case errors.As(err, &inv) && inv.Reason == x509.Expired:
		return Peer{}, fmt.Errorf("%w: %q is valid from %s to %s", ErrExpired, cred.Subject.CommonName,
			cred.NotBefore.UTC().Format(time.RFC3339), cred.NotAfter.UTC().Format(time.RFC3339))
	default:
		return Peer{}, fmt.Errorf("%w: %v", ErrBadCertificate, err)
	}
	if claimed != cluster {
		return Peer{}, fmt.Errorf("%w: it names cluster %q, not %q", ErrWrongCluster, claimed, cluster)
	}
	if cred.IsCA || len(cred.Subject.OrganizationalUnit) != 1 || cred.Subject.OrganizationalUnit[0] != machineOU {
		return Peer{}, fmt.Errorf("%w: not a machine credential", ErrBadCertificate)
	}
	if err := CheckName("machine", cred.Subject.CommonName); err != nil {
		return Peer{}, fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	return Peer{Cluster: claimed, Machine: cred.Subject.CommonName, KeyID: KeyID(pub),
		Serial: SerialString(cred.SerialNumber), NotAfter: cred.NotAfter, Certificate: cred}, nil
}

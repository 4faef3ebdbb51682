package cluster

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// The files a machine keeps in its monitor's directory, beside the
// monitor's socket.
const (
	// KeyFile holds the machine's private key: PKCS#8 in PEM, mode 0600.
	KeyFile = "machine.key"
	// CredentialFile holds the machine's credential, the certificate the
	// cluster root issued it, in PEM.
	CredentialFile = "machine.crt"
	// RootCertFile holds the certificate of the cluster root the machine
	// joined, in PEM.
	RootCertFile = "cluster-root.crt"
	// RevocationsFile holds the root's revocation list the machine last
	// loaded: an X.509 CRL in PEM.
	RevocationsFile = "cluster-revoked.crl"
)

// The files of a cluster root's directory.
const (
	// RootKeyFile holds the root's private key, mode 0600.
	RootKeyFile = "root.key"
	// RootCertName holds the root's self-signed certificate.
	RootCertName = "root.crt"
	// RootRevocationsFile holds the latest revocation list the root signed.
	RootRevocationsFile = "revoked.crl"
	// IssuedDir holds a copy of every credential the root issued, one file
	// per serial, so that a machine's credentials can be revoked by name.
	IssuedDir = "issued"
)

// PEM block types.
const (
	pemPrivateKey  = "PRIVATE KEY"
	pemPublicKey   = "PUBLIC KEY"
	pemCertificate = "CERTIFICATE"
	pemRequest     = "CERTIFICATE REQUEST"
	pemCRL         = "X509 CRL"
)

// Errors about key files, matchable with errors.Is.
var (
	// ErrKeyPermissions: a private key file that is not a regular file of
	// this user with no permission for its group or others. It is refused
	// rather than used, as ssh refuses such keys: whoever could read it
	// may already have copied it.
	ErrKeyPermissions = errors.New("private key file is not private")
	// ErrKeyCorrupt: a private key file that does not hold an Ed25519 key
	// in PKCS#8 PEM.
	ErrKeyCorrupt = errors.New("private key file is corrupt")
	// ErrNoKey: the machine has no key yet (LoadKey; LoadOrCreateKey makes
	// one).
	ErrNoKey = errors.New("machine has no key")
)

// checkPrivateFile checks that path is a regular file (not a symbolic
// link) of this user that its group and others cannot use.
func checkPrivateFile(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: %w: not a regular file (%s)", path, ErrKeyPermissions, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%s: %w: owned by uid %d, not %d", path, ErrKeyPermissions, st.Uid, os.Getuid())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s: %w: mode %04o lets others read it (want 0600; chmod 600 it if no one else could have copied it, else make a new key)", path, ErrKeyPermissions, perm)
	}
	return nil
}

// readPrivateKey reads the Ed25519 private key at path after checking
// that the file is private.
func readPrivateKey(path string) (ed25519.PrivateKey, error) {
	if err := checkPrivateFile(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != pemPrivateKey {
		return nil, fmt.Errorf("%s: %w: no %q PEM block", path, ErrKeyCorrupt, pemPrivateKey)
	}
	if len(trimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%s: %w: data after the key", path, ErrKeyCorrupt)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrKeyCorrupt, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: %w: a %T, not an Ed25519 key", path, ErrKeyCorrupt, k)
	}
	return ek, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// createPrivateKey makes a new Ed25519 key and stores it at path, mode
// 0600. The file is written whole under a temporary name and linked into
// place, so no one ever reads half a key, and of two processes that race
// to create it, one wins and the other gets fs.ErrExist.
func createPrivateKey(path string) (ed25519.PrivateKey, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := writeNew(path, pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return k, nil
}

// writeNew writes data to path, which must not exist, with mode perm.
func writeNew(path string, data []byte, perm os.FileMode) error {
	tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	return os.Link(tmp, path)
}

// writeReplace writes data to path with mode perm, replacing it whole if
// it exists.
func writeReplace(path string, data []byte, perm os.FileMode) error {
	tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeTemp writes data to a new file beside path, with mode perm (the
// umask does not apply), and returns its name.
func writeTemp(path string, data []byte, perm os.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

// readCertFile reads the one certificate in the PEM file at path.
func readCertFile(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	certs, err := parseCertsPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("%s: %w: %d certificates, want 1", path, ErrBadFile, len(certs))
	}
	return certs[0], nil
}

// ErrBadFile: a certificate, request, public key or revocation list that
// cannot be parsed.
var ErrBadFile = errors.New("malformed file")

// ParseCertificates parses the PEM certificates of b (a credential file,
// a root certificate); anything else in b is an error.
func ParseCertificates(b []byte) ([]*x509.Certificate, error) { return parseCertsPEM(b) }

// parseCertsPEM parses every CERTIFICATE block of b; any other block, or
// none at all, is an error.
func parseCertsPEM(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != pemCertificate {
			return nil, fmt.Errorf("%w: a %q PEM block where certificates were expected", ErrBadFile, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadFile, err)
		}
		certs = append(certs, c)
	}
	if len(trimSpace(b)) != 0 {
		return nil, fmt.Errorf("%w: data that is not PEM", ErrBadFile)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%w: no certificate", ErrBadFile)
	}
	return certs, nil
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: c.Raw})
}

// exists reports whether path exists; an error other than "does not
// exist" is returned.
func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

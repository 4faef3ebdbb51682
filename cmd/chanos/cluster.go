package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chanos/chanos/cluster"
	"github.com/chanos/chanos/monitor"
)

const clusterUsage = `usage: chanos cluster COMMAND [flags]

Machine identity and admission (docs/cluster.md). The admin keeps
the cluster's root in a directory of their own; each machine keeps its key
and credential in its monitor's directory.

commands:
  init    make a cluster's root (admin)
  admit   issue a credential to a machine (admin)
  revoke  revoke credentials, and sign the new revocation list (admin)
  join    install a credential, or a revocation list, on this machine
  show    this machine's key and credential, or (--root) a cluster's root

'chanos cluster COMMAND -h' prints a command's usage. Every command takes
--json: one JSON document on stdout, a failure included.
`

const clusterInitUsage = `usage: chanos cluster init --root DIR --name CLUSTER [--validity D] [--json]

Makes a new cluster root in DIR (created with mode 0700 if missing): its
private key root.key (0600), its self-signed certificate root.crt, which
names the cluster, and an empty revocation list revoked.crl. Keep DIR on
the admin's machine, not on the cluster's: whoever holds root.key admits
machines. --validity is the root's lifetime (default 87600h, ten years).

--json prints {"cluster", "root_dir", "root_cert", "fingerprint", "not_after"}.
`

const clusterAdmitUsage = `usage: chanos cluster admit --root DIR --name MACHINE [--out FILE] [--validity D] [--json] REQUEST

Issues a credential to the machine whose public key or signed request is
in the file REQUEST ('chanos cluster show' prints the key; 'chanos cluster
show --request FILE' writes a request, which also proves that the machine
holds the key). MACHINE is the machine's name in the cluster. The
credential, with the root's certificate, goes to FILE (default
MACHINE.crt), which 'chanos cluster join' installs on the machine; a copy
stays in DIR/issued. --validity is its lifetime (default 8760h, a year;
never past the root's).

--json prints {"cluster", "machine", "serial", "key_id", "not_before",
"not_after", "out"}.
`

const clusterJoinUsage = `usage: chanos cluster join [--dir DIR] [--root-cert FILE] [--json] CREDENTIAL
       chanos cluster join [--dir DIR] --revocations FILE [--json]

Installs the credential file CREDENTIAL ('chanos cluster admit' wrote it)
in this machine's monitor directory (--dir, as for 'chanos monitor'), after
checking that it is for this machine's key, signed by the root that comes
with it and not expired. --root-cert pins the root: the credential must be
signed by the root in FILE. With --revocations, installs the revocation
list in FILE ('chanos cluster revoke' wrote it) after checking that the
cluster's root signed it and that it is not older than the machine's.
Both stay in the monitor directory for the monitor to load.

--json prints {"cluster", "machine", "serial", "key_id", "not_after",
"dir"}, or with --revocations {"number", "revoked"}.
`

const clusterRevokeUsage = `usage: chanos cluster revoke --root DIR [--serial HEX]... [--machine NAME]... [--out FILE] [--json]

Revokes credentials the root issued, by serial or by machine name (all of
that machine's credentials), and signs the root's new revocation list,
which it stores in DIR/revoked.crl and writes to FILE if given. With no
--serial or --machine it signs the same list again. Machines learn of it
through 'chanos cluster join --revocations FILE' on one machine: its
running monitor takes it within a second and shares it through etcd with
the others. From then on their control links refuse the revoked machines.

--json prints {"cluster", "number", "revoked", "out"}: revoked lists every
serial the list revokes.
`

const clusterShowUsage = `usage: chanos cluster show [--dir DIR] [--request FILE] [--name NAME] [--json]
       chanos cluster show --root DIR [--json]

Shows this machine's identity: its key id and public key (the key is made,
mode 0600, in the monitor directory on first use), and the credential it
joined with, if any. --request FILE also writes a request to admit this
machine, signed with its key, suggesting the name NAME. With --root, shows
a cluster's root instead: its name and the credentials it issued, with
those it revoked.

--json prints {"dir", "key_id", "public_key", "joined", "cluster",
"machine", "serial", "not_after", "root_fingerprint", "revocations_number",
"revoked", "credential_error"}, or with --root {"cluster", "root_dir",
"fingerprint", "not_after", "revocations_number", "issued": [{"machine",
"serial", "key_id", "not_after", "revoked"}]}.
`

// clusterUsageText returns the usage of 'chanos cluster' or of one of its
// commands ("cluster init", ...), ok false for another command.
func clusterUsageText(cmd string) (string, bool) {
	switch cmd {
	case "cluster":
		return clusterUsage, true
	case "cluster init":
		return clusterInitUsage, true
	case "cluster admit":
		return clusterAdmitUsage, true
	case "cluster join":
		return clusterJoinUsage, true
	case "cluster revoke":
		return clusterRevokeUsage, true
	case "cluster show":
		return clusterShowUsage, true
	}
	return "", false
}

// runCluster runs 'chanos cluster'.
func runCluster(_ context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("cluster", "no command given")
	}
	switch args[0] {
	case "init":
		return runClusterInit(args[1:], os.Stdout)
	case "admit":
		return runClusterAdmit(args[1:], os.Stdout)
	case "join":
		return runClusterJoin(args[1:], os.Stdout)
	case "revoke":
		return runClusterRevoke(args[1:], os.Stdout)
	case "show":
		return runClusterShow(args[1:], os.Stdout)
	case "help", "-h", "-help", "--help":
		fmt.Print(clusterUsage)
		return nil
	}
	return usagef("cluster", "unknown command %q", args[0])
}

// certFingerprint returns the SHA-256 of a certificate, in hex.
func certFingerprint(c *x509.Certificate) string {
	h := sha256.Sum256(c.Raw)
	return hex.EncodeToString(h[:])
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// noArgs checks that fs has no arguments left.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef(fs.Name(), "unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func runClusterInit(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cluster init", flag.ContinueOnError)
	root := fs.String("root", "", "")
	name := fs.String("name", "", "")
	validity := fs.Duration("validity", cluster.DefaultRootValidity, "")
	asJSON := fs.Bool("json", false, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *root == "" || *name == "" {
		return usagef("cluster init", "--root and --name are required")
	}
	if *validity <= 0 {
		return usagef("cluster init", "--validity must be positive")
	}
	dir, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	r, err := cluster.InitRoot(dir, *name, *validity)
	if err != nil {
		return fmt.Errorf("cluster init: %w", err)
	}
	out := struct {
		Cluster     string `json:"cluster"`
		RootDir     string `json:"root_dir"`
		RootCert    string `json:"root_cert"`
		Fingerprint string `json:"fingerprint"`
		NotAfter    string `json:"not_after"`
	}{r.Cluster(), dir, filepath.Join(dir, cluster.RootCertName), certFingerprint(r.Certificate()), rfc3339(r.Certificate().NotAfter)}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	_, err = fmt.Fprintf(stdout, "cluster %s: root made in %s\nroot certificate %s\nfingerprint %s (sha256)\nvalid until %s\n",
		out.Cluster, out.RootDir, out.RootCert, out.Fingerprint, out.NotAfter)
	return err
}

func runClusterAdmit(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cluster admit", flag.ContinueOnError)
	root := fs.String("root", "", "")
	name := fs.String("name", "", "")
	outPath := fs.String("out", "", "")
	validity := fs.Duration("validity", cluster.DefaultCredentialValidity, "")
	asJSON := fs.Bool("json", false, "")
	reqs, err := parseArgs(fs, args) // flags before or after the request file
	if err != nil {
		return err
	}
	if len(reqs) != 1 {
		return usagef("cluster admit", "want one REQUEST file, got %d", len(reqs))
	}
	if *root == "" || *name == "" {
		return usagef("cluster admit", "--root and --name are required")
	}
	if *validity <= 0 {
		return usagef("cluster admit", "--validity must be positive")
	}
	if err := cluster.CheckName("machine", *name); err != nil {
		return usagef("cluster admit", "%v", err)
	}
	if *outPath == "" {
		*outPath = *name + ".crt"
	}
	r, err := cluster.LoadRoot(*root)
	if err != nil {
		return fmt.Errorf("cluster admit: %w", err)
	}
	b, err := os.ReadFile(reqs[0])
	if err != nil {
		return fmt.Errorf("cluster admit: %w", err)
	}
	pub, _, err := cluster.ParseAdmitRequest(b)
	if err != nil {
		return fmt.Errorf("cluster admit: %s: %w", reqs[0], err)
	}
	now := time.Now()
	cred, err := r.Admit(pub, *name, now.Add(-time.Minute), now.Add(*validity))
	if err != nil {
		return fmt.Errorf("cluster admit: %w", err)
	}
	if err := os.WriteFile(*outPath, r.Bundle(cred), 0o644); err != nil {
		return fmt.Errorf("cluster admit: %w", err)
	}
	out := struct {
		Cluster   string `json:"cluster"`
		Machine   string `json:"machine"`
		Serial    string `json:"serial"`
		KeyID     string `json:"key_id"`
		NotBefore string `json:"not_before"`
		NotAfter  string `json:"not_after"`
		Out       string `json:"out"`
	}{r.Cluster(), *name, cluster.SerialString(cred.SerialNumber), cluster.KeyID(pub), rfc3339(cred.NotBefore),
		rfc3339(cred.NotAfter), *outPath}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	_, err = fmt.Fprintf(stdout, "admitted %s to cluster %s\nkey id %s\nserial %s\nvalid %s to %s\ncredential written to %s: 'chanos cluster join %s' on the machine installs it\n",
		out.Machine, out.Cluster, out.KeyID, out.Serial, out.NotBefore, out.NotAfter, out.Out, filepath.Base(out.Out))
	return err
}

// machineDir returns the monitor directory named by --dir (monitor.Dir's
// rule), created if missing.
func machineDir(flagDir string) (string, error) {
	dir, err := monitor.Dir(flagDir)
	if err != nil {
		return "", err
	}
	if err := monitor.PrepareDir(dir); err != nil {
		return "", err
	}
	return dir, nil
}

func runClusterJoin(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cluster join", flag.ContinueOnError)
	dirFlag := fs.String("dir", "", "")
	rootCert := fs.String("root-cert", "", "")
	revocations := fs.String("revocations", "", "")
	asJSON := fs.Bool("json", false, "")
	creds, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *revocations != "" && (len(creds) > 0 || *rootCert != ""):
		return usagef("cluster join", "--revocations installs a list alone: give no credential or --root-cert with it")
	case *revocations == "" && len(creds) != 1:
		return usagef("cluster join", "want one CREDENTIAL file, got %d", len(creds))
	}
	dir, err := machineDir(*dirFlag)
	if err != nil {
		return fmt.Errorf("cluster join: %w", err)
	}
	if *revocations != "" {
		b, err := os.ReadFile(*revocations)
		if err != nil {
			return fmt.Errorf("cluster join: %w", err)
		}
		if err := cluster.InstallRevocations(dir, b); err != nil {
			return fmt.Errorf("cluster join: %s: %w", *revocations, err)
		}
		root, err := readRootCert(filepath.Join(dir, cluster.RootCertFile))
		if err != nil {
			return fmt.Errorf("cluster join: %w", err)
		}
		rl, err := cluster.ParseRevocations(b, root)
		if err != nil {
			return fmt.Errorf("cluster join: %w", err)
		}
		out := struct {
			Number  string   `json:"number"`
			Revoked []string `json:"revoked"`
		}{rl.Number.String(), revokedSerials(rl)}
		if *asJSON {
			return writeJSON(stdout, out)
		}
		_, err = fmt.Fprintf(stdout, "revocation list number %s installed in %s: %d credentials revoked\n", out.Number, dir, len(out.Revoked))
		return err
	}
	var pinned *x509.Certificate
	if *rootCert != "" {
		if pinned, err = readRootCert(*rootCert); err != nil {
			return fmt.Errorf("cluster join: %w", err)
		}
	}
	b, err := os.ReadFile(creds[0])
	if err != nil {
		return fmt.Errorf("cluster join: %w", err)
	}
	id, err := cluster.Join(dir, b, pinned)
	if err != nil {
		return fmt.Errorf("cluster join: %s: %w", creds[0], err)
	}
	c := id.Certificate()
	out := struct {
		Cluster  string `json:"cluster"`
		Machine  string `json:"machine"`
		Serial   string `json:"serial"`
		KeyID    string `json:"key_id"`
		NotAfter string `json:"not_after"`
		Dir      string `json:"dir"`
	}{id.Cluster(), id.Machine(), cluster.SerialString(c.SerialNumber), id.KeyID(), rfc3339(c.NotAfter), dir}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	_, err = fmt.Fprintf(stdout, "joined cluster %s as %s (serial %s, valid until %s); credential installed in %s\n",
		out.Cluster, out.Machine, out.Serial, out.NotAfter, out.Dir)
	return err
}

// readRootCert reads a certificate file (one certificate in PEM).
func readRootCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	certs, err := cluster.ParseCertificates(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("%s: %d certificates, want the root's alone", path, len(certs))
	}
	return certs[0], nil
}

func revokedSerials(rl *x509.RevocationList) []string {
	out := []string{}
	for _, e := range rl.RevokedCertificateEntries {
		out = append(out, cluster.SerialString(e.SerialNumber))
	}
	sort.Strings(out)
	return out
}

// stringList is a flag that may be given more than once.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runClusterRevoke(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cluster revoke", flag.ContinueOnError)
	root := fs.String("root", "", "")
	outPath := fs.String("out", "", "")
	asJSON := fs.Bool("json", false, "")
	var serials, machines stringList
	fs.Var(&serials, "serial", "")
	fs.Var(&machines, "machine", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *root == "" {
		return usagef("cluster revoke", "--root is required")
	}
	r, err := cluster.LoadRoot(*root)
	if err != nil {
		return fmt.Errorf("cluster revoke: %w", err)
	}
	issued, err := r.Issued()
	if err != nil {
		return fmt.Errorf("cluster revoke: %w", err)
	}
	known := map[string]bool{}
	for _, c := range issued {
		known[c.SerialNumber.String()] = true
	}
	var revoke []*big.Int
	for _, s := range serials {
		n, err := cluster.ParseSerial(s)
		if err != nil {
			return usagef("cluster revoke", "%v", err)
		}
		if !known[n.String()] {
			return fmt.Errorf("cluster revoke: serial %s: %w (this root issued no such credential)", s, cluster.ErrUnknownSerial)
		}
		revoke = append(revoke, n)
	}
	for _, m := range machines {
		ns, err := r.SerialsOf(m)
		if err != nil {
			return fmt.Errorf("cluster revoke: %w", err)
		}
		revoke = append(revoke, ns...)
	}
	der, err := r.Revoke(revoke...)
	if err != nil {
		return fmt.Errorf("cluster revoke: %w", err)
	}
	if *outPath != "" {
		if err := os.WriteFile(*outPath, cluster.CRLPEM(der), 0o644); err != nil {
			return fmt.Errorf("cluster revoke: %w", err)
		}
	}
	rl, err := x509.ParseRevocationList(der)
	if err != nil {
		return fmt.Errorf("cluster revoke: %w", err)
	}
	out := struct {
		Cluster string   `json:"cluster"`
		Number  string   `json:"number"`
		Revoked []string `json:"revoked"`
		Out     string   `json:"out,omitempty"`
	}{r.Cluster(), rl.Number.String(), revokedSerials(rl), *outPath}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "cluster %s: revocation list number %s revokes %d credentials\n", out.Cluster, out.Number, len(out.Revoked))
	for _, s := range out.Revoked {
		fmt.Fprintf(stdout, "  %s\n", s)
	}
	where := filepath.Join(r.Dir(), cluster.RootRevocationsFile)
	if *outPath != "" {
		where = *outPath
	}
	_, err = fmt.Fprintf(stdout, "list written to %s: 'chanos cluster join --revocations %s' on each machine loads it\n", where, filepath.Base(where))
	return err
}

func runClusterShow(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cluster show", flag.ContinueOnError)
	dirFlag := fs.String("dir", "", "")
	root := fs.String("root", "", "")
	request := fs.String("request", "", "")
	name := fs.String("name", "", "")
	asJSON := fs.Bool("json", false, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *root != "" {
		if *dirFlag != "" || *request != "" || *name != "" {
			return usagef("cluster show", "--root shows a root alone: give no --dir, --request or --name with it")
		}
		return showRoot(*root, *asJSON, stdout)
	}
	if *name != "" && *request == "" {
		return usagef("cluster show", "--name names the machine in a request: give --request FILE with it")
	}
	if *name != "" {
		if err := cluster.CheckName("machine", *name); err != nil {
			return usagef("cluster show", "%v", err)
		}
	}
	dir, err := machineDir(*dirFlag)
	if err != nil {
		return fmt.Errorf("cluster show: %w", err)
	}
	key, err := cluster.LoadOrCreateKey(dir)
	if err != nil {
		return fmt.Errorf("cluster show: %w", err)
	}
	if *request != "" {
		req, err := cluster.Request(key, *name)
		if err == nil {
			err = os.WriteFile(*request, req, 0o644)
		}
		if err != nil {
			return fmt.Errorf("cluster show: request: %w", err)
		}
	}
	out := struct {
		Dir               string   `json:"dir"`
		KeyID             string   `json:"key_id"`
		PublicKey         string   `json:"public_key"`
		Request           string   `json:"request,omitempty"`
		Joined            bool     `json:"joined"`
		Cluster           string   `json:"cluster,omitempty"`
		Machine           string   `json:"machine,omitempty"`
		Serial            string   `json:"serial,omitempty"`
		NotAfter          string   `json:"not_after,omitempty"`
		RootFingerprint   string   `json:"root_fingerprint,omitempty"`
		RevocationsNumber string   `json:"revocations_number,omitempty"`
		Revoked           []string `json:"revoked,omitempty"`
		CredentialError   string   `json:"credential_error,omitempty"`
	}{Dir: dir, Request: *request}
	id, err := cluster.LoadIdentity(dir)
	switch {
	case err == nil:
		c := id.Certificate()
		out.Joined, out.Cluster, out.Machine = true, id.Cluster(), id.Machine()
		out.Serial, out.NotAfter = cluster.SerialString(c.SerialNumber), rfc3339(c.NotAfter)
		out.RootFingerprint = certFingerprint(id.Root())
		if n := id.Revocations.Number(); n != nil {
			out.RevocationsNumber = n.String()
			out.Revoked = id.Revocations.Serials()
			sort.Strings(out.Revoked)
		}
		if err := id.Revocations.Check(c); err != nil {
			out.CredentialError = err.Error()
		}
	case errors.Is(err, cluster.ErrNotJoined):
	case errors.Is(err, cluster.ErrCredential), errors.Is(err, os.ErrNotExist):
		out.CredentialError = err.Error()
	default:
		return fmt.Errorf("cluster show: %w", err)
	}
	pk := key.Public().(ed25519.PublicKey)
	out.KeyID, out.PublicKey = cluster.KeyID(pk), string(cluster.PublicKeyPEM(pk))
	if *asJSON {
		return writeJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "monitor directory\t%s\n", out.Dir)
	fmt.Fprintf(tw, "key id\t%s\n", out.KeyID)
	if out.Joined {
		fmt.Fprintf(tw, "cluster\t%s\n", out.Cluster)
		fmt.Fprintf(tw, "machine\t%s\n", out.Machine)
		fmt.Fprintf(tw, "serial\t%s\n", out.Serial)
		fmt.Fprintf(tw, "valid until\t%s\n", out.NotAfter)
		fmt.Fprintf(tw, "root fingerprint\t%s\n", out.RootFingerprint)
		if out.RevocationsNumber != "" {
			fmt.Fprintf(tw, "revocation list\tnumber %s, %d revoked\n", out.RevocationsNumber, len(out.Revoked))
		} else {
			fmt.Fprintf(tw, "revocation list\tnone\n")
		}
	} else {
		fmt.Fprintf(tw, "cluster\tnot joined\n")
	}
	if out.CredentialError != "" {
		fmt.Fprintf(tw, "credential problem\t%s\n", out.CredentialError)
	}
	if out.Request != "" {
		fmt.Fprintf(tw, "request written to\t%s\n", out.Request)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "public key:\n%s", out.PublicKey)
	return err
}

func showRoot(dir string, asJSON bool, stdout io.Writer) error {
	r, err := cluster.LoadRoot(dir)
	if err != nil {
		return fmt.Errorf("cluster show: %w", err)
	}
	issued, err := r.Issued()
	if err != nil {
		return fmt.Errorf("cluster show: %w", err)
	}
	der, err := r.RevocationList()
	if err != nil {
		return fmt.Errorf("cluster show: %w", err)
	}
	rl, err := cluster.ParseRevocations(der, r.Certificate())
	if err != nil {
		return fmt.Errorf("cluster show: %w", err)
	}
	revoked := map[string]bool{}
	for _, s := range revokedSerials(rl) {
		revoked[s] = true
	}
	type issuedEntry struct {
		Machine  string `json:"machine"`
		Serial   string `json:"serial"`
		KeyID    string `json:"key_id"`
		NotAfter string `json:"not_after"`
		Revoked  bool   `json:"revoked"`
	}
	out := struct {
		Cluster           string        `json:"cluster"`
		RootDir           string        `json:"root_dir"`
		Fingerprint       string        `json:"fingerprint"`
		NotAfter          string        `json:"not_after"`
		RevocationsNumber string        `json:"revocations_number"`
		Issued            []issuedEntry `json:"issued"`
	}{r.Cluster(), r.Dir(), certFingerprint(r.Certificate()), rfc3339(r.Certificate().NotAfter), rl.Number.String(), []issuedEntry{}}
	for _, c := range issued {
		pk, _ := c.PublicKey.(ed25519.PublicKey)
		s := cluster.SerialString(c.SerialNumber)
		out.Issued = append(out.Issued, issuedEntry{c.Subject.CommonName, s, cluster.KeyID(pk), rfc3339(c.NotAfter), revoked[s]})
	}
	if asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "cluster %s  root %s\nfingerprint %s (sha256)  valid until %s\nrevocation list number %s\n\n",
		out.Cluster, out.RootDir, out.Fingerprint, out.NotAfter, out.RevocationsNumber)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MACHINE\tSERIAL\tKEY ID\tNOT AFTER\tSTATE")
	now := time.Now()
	for i, e := range out.Issued {
		state := "valid"
		switch {
		case e.Revoked:
			state = "revoked"
		case now.After(issued[i].NotAfter):
			state = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Machine, e.Serial, e.KeyID, e.NotAfter, state)
	}
	return tw.Flush()
}

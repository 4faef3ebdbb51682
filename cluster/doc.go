// Package cluster holds what a monitor needs to be one machine of many:
// its long-term identity, the cluster's trust root that admits machines
// and revokes them, and the monitor-to-monitor control link, a mutually
// authenticated TLS 1.3 connection between two admitted machines that
// carries chanos wire frames.
//
// The pieces, and where each lives:
//
//   - A machine's key pair (Ed25519) sits in its monitor's directory, in
//     KeyFile, mode 0600; LoadOrCreateKey makes it on first use and
//     refuses a key file others could read. Only the monitor loads it:
//     package chanos, the domains' API, never imports this package.
//   - A cluster's root (an Ed25519 CA key and a self-signed certificate
//     that names the cluster) sits in a directory the admin chooses
//     (InitRoot). Root.Admit issues a machine credential: an X.509
//     certificate that names the cluster and the machine, with a serial
//     and an expiry. Join installs it, with the root certificate, in a
//     monitor's directory; LoadIdentity reads all of it back.
//   - Root.Revoke adds a credential to the root's revocation list, an
//     X.509 CRL signed by the root. A machine holds the list in a
//     Revocations value, which the link consults on every handshake and
//     which can be replaced at run time (Revocations.Update) from bytes
//     that came from anywhere: a file, etcd.
//   - Listen and Dial make Links: TLS 1.3 only, each side presents its
//     credential and checks the peer's chain to the cluster root, the
//     cluster name, the expiry and the revocation list. A Link is an
//     interconnect.Link carrying wire frames, so the connection engine can
//     run an IDL interface over it.
//
// docs/cluster.md describes the model, the threats it covers and
// those it does not, and how an admin runs it.
package cluster

package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/chanos/chanos/cluster/etcd"
	"github.com/chanos/chanos/cluster/member"
)

const monitorClusterUsage = `
Cluster mode (docs/cluster.md): the machine joins the cluster NAME, whose
names and machines live in etcd. The machine must have joined the cluster
first ('chanos cluster join' puts its credential in the monitor's
directory).

  --cluster NAME        the cluster to join; without it the monitor runs alone
  --etcd URLS           etcd's client URLs, comma-separated
  --etcd-ca FILE        the CA that signed etcd's certificates (https URLs)
  --etcd-cert FILE      this machine's client certificate for etcd
  --etcd-key FILE       its key
  --listen ADDR         where the control link from other monitors listens
                        (host:port); none when empty
  --machine-name NAME   the machine's name for people (default: its
                        credential's)
  --lease-ttl D         the machine's lease: a dead machine's names go this
                        long after its last renewal (default %v)
  --keep-alive D        how often the lease is renewed (default %v, or a
                        third of the TTL when that is less; at most half
                        the TTL)
  --net-auth-only       connections between this machine's domains and
                        another's are authenticated but not encrypted when
                        that machine sets it too (trusted networks only;
                        docs/net.md, "Without encryption")
`

// clusterFlags are the cluster mode's flags of 'chanos monitor'.
type clusterFlags struct {
	cluster, endpoints        string
	caFile, certFile, keyFile string
	listen, machineName       string
	leaseTTL, keepAlive       time.Duration
	netAuthOnly               bool
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.cluster, "cluster", "", "")
	fs.StringVar(&c.endpoints, "etcd", "", "")
	fs.StringVar(&c.caFile, "etcd-ca", "", "")
	fs.StringVar(&c.certFile, "etcd-cert", "", "")
	fs.StringVar(&c.keyFile, "etcd-key", "", "")
	fs.StringVar(&c.listen, "listen", "", "")
	fs.StringVar(&c.machineName, "machine-name", "", "")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", etcd.DefaultTTL, "")
	fs.DurationVar(&c.keepAlive, "keep-alive", 0, "")
	fs.BoolVar(&c.netAuthOnly, "net-auth-only", false, "")
}

// check refuses the cluster flags given without --cluster, and a cluster
// without etcd.
func (c *clusterFlags) check() error {
	if c.cluster == "" {
		if c.endpoints != "" || c.caFile != "" || c.certFile != "" || c.keyFile != "" || c.listen != "" || c.machineName != "" || c.netAuthOnly {
			return usagef("monitor", "--etcd, --etcd-ca, --etcd-cert, --etcd-key, --listen, --machine-name and --net-auth-only need --cluster")
		}
		return nil
	}
	if c.endpoints == "" {
		return usagef("monitor", "--cluster needs --etcd URLS")
	}
	if (c.certFile == "") != (c.keyFile == "") {
		return usagef("monitor", "--etcd-cert and --etcd-key go together")
	}
	if c.listen != "" {
		if err := hostPort(c.listen); err != nil {
			return usagef("monitor", "--listen %v", err)
		}
	}
	return nil
}

// config is the member's configuration the flags give.
func (c *clusterFlags) config(log *slog.Logger) (member.Config, error) {
	t, err := etcdTLS(c)
	if err != nil {
		return member.Config{}, err
	}
	return member.Config{
		Cluster:     c.cluster,
		Etcd:        strings.Split(c.endpoints, ","),
		EtcdTLS:     t,
		Listen:      c.listen,
		MachineName: c.machineName,
		LeaseTTL:    c.leaseTTL,
		KeepAlive:   c.keepAlive,
		NetAuthOnly: c.netAuthOnly,
		Logger:      log,
	}, nil
}

// etcdTLS builds the TLS configuration of etcd's client from the flags:
// nil when none is given.
func etcdTLS(cf *clusterFlags) (*tls.Config, error) {
	if cf.caFile == "" && cf.certFile == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if cf.caFile != "" {
		b, err := os.ReadFile(cf.caFile)
		if err != nil {
			return nil, fmt.Errorf("monitor: --etcd-ca: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("monitor: --etcd-ca %s: no PEM certificate in it", cf.caFile)
		}
	}
	if cf.certFile != "" {
		cert, err := tls.LoadX509KeyPair(cf.certFile, cf.keyFile)
		if err != nil {
			return nil, fmt.Errorf("monitor: --etcd-cert, --etcd-key: %w", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// hostPort reports whether addr is a host:port a peer can dial: a
// listen address with no host, or an unspecified one, is not.
func hostPort(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q: give the address the other machines reach this one at, not a wildcard", addr)
	}
	return nil
}

// Package etcd puts a chanos machine into a cluster whose shared state
// lives in etcd: the machine's lease (Session), the cluster-wide
// nameservice (Names, a names.Store) and the list of machines (Registry).
// It is the only package, tests aside, that imports etcd's client, so that
// the rest of chanos builds and runs without it; a single machine keeps
// names.Memory and needs no etcd at all.
//
// Keys live under /chanos/<cluster>/; docs/cluster.md describes them and
// the model: names leased through their machine, fencing, and failure
// detection.
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/chanos/chanos/names"
)

// Defaults of Config. With them a dead machine's names are gone within
// DefaultTTL (6 s) of its last renewal, well inside the 10 s that
// cluster mode promises.
const (
	DefaultTTL         = 6 * time.Second
	DefaultKeepAlive   = 2 * time.Second
	DefaultOpTimeout   = 5 * time.Second
	DefaultDialTimeout = 5 * time.Second
	// DefaultLateCommit outlasts every way known for a request to be
	// done late: etcd commits or drops a proposal within a leader's term
	// (a leader without a quorum steps down after an election timeout,
	// 1 s by default, and the next commits or discards what it left),
	// and answers or gives up within its request timeout (7 s by
	// default); a request still on its way when the client gave up may
	// reach etcd with its connection, which gRPC's keep-alive closes
	// within KeepAlive+OpTimeout, and whose written bytes the kernel
	// may still send while it retransmits them (about 100 s on Linux,
	// tcp_orphan_retries).
	DefaultLateCommit = 2 * time.Minute
)

// Config says how to reach etcd and how this machine takes part.
type Config struct {
	// Endpoints are etcd's client URLs, e.g. https://10.0.0.1:2379.
	Endpoints []string
	// TLS, when set, secures the connection to etcd: RootCAs checks the
	// members (etcd's --trusted-ca-file), Certificates holds this
	// machine's client certificate and key (for etcd's
	// --client-cert-auth). Use https:// endpoints with it.
	TLS *tls.Config
	// Username and Password, when set, authenticate to etcd's own RBAC.
	Username, Password string
	// Cluster names the cluster; every key lives under /chanos/<Cluster>/.
	// It is 1 to 64 bytes of letters, digits, '-', '_' and '.'.
	Cluster string
	// Machine is this machine's id, non-zero and unique in the cluster.
	Machine uint64
	// TTL is the lease's time to live (default DefaultTTL, whole
	// seconds, at least 2 s): how long after its last renewal a dead or
	// cut-off machine, and its names, are gone.
	TTL time.Duration
	// KeepAlive is how often the lease is renewed (default
	// DefaultKeepAlive, and at most TTL/2, so that one lost renewal does
	// not lose the lease).
	KeepAlive time.Duration
	// OpTimeout bounds each request to etcd (default DefaultOpTimeout):
	// a store operation that cannot complete in time fails with
	// names.ErrUnavailable rather than hang.
	OpTimeout time.Duration
	// DialTimeout bounds Open's first connection (default
	// DefaultDialTimeout).
	DialTimeout time.Duration
	// LateCommit is how long after sending a request etcd may still do
	// it when its answer did not come (default DefaultLateCommit, and
	// at least OpTimeout). The put of a set without an answer that turns
	// up within it, after the store gave up on that set (its owner's
	// release), is nobody's, and the store deletes it; one that turns up
	// later stays until the machine's lease ends.
	LateCommit time.Duration
	// OnLost is told of each name this machine held that is gone without
	// its owner removing it: the machine's lease expired (it was cut off
	// or frozen longer than the TTL) or someone deleted the key behind
	// chanos's back. The name is not put back: another machine may hold
	// it by now. The monitor tells the owning domain through its
	// monitor-loss path. OnLost is called once per name, outside the
	// store's lock, on whichever goroutine learned of the loss (the
	// watch's, the session's, or a store call's); it must not block.
	OnLost func(owner names.Owner, name string)
	// Logger receives the cluster's warnings (default slog.Default()).
	Logger *slog.Logger
}

// Machine is this machine's place in the cluster: its etcd client, its
// Session, its Names store and the Registry of machines.
type Machine struct {
	client   *clientv3.Client
	session  *Session
	names    *Names
	registry *Registry

	closeOnce sync.Once
	closeErr  error
}

// Open connects to etcd, takes a lease for the machine and loads the
// names. It fails with names.ErrUnavailable when etcd cannot be reached
// within the dial and operation timeouts.
func Open(ctx context.Context, cfg Config) (*Machine, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		TLS:                  cfg.TLS,
		Username:             cfg.Username,
		Password:             cfg.Password,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    cfg.KeepAlive,
		DialKeepAliveTimeout: cfg.OpTimeout,
		// The client's own log goes nowhere: what matters is reported
		// through errors and cfg.Logger.
		Logger: zap.NewNop(),
		// gRPC's default reconnect backoff grows to two minutes, and a
		// connect may take 20 s: a machine cut off for a while would then
		// reconnect long after its network came back, and lose a lease
		// it could have kept. Redial within a second, each try bounded.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   time.Second,
			},
			MinConnectTimeout: cfg.KeepAlive,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w: %v", strings.Join(cfg.Endpoints, ","), names.ErrUnavailable, err)
	}
	sess, err := newSession(ctx, client, &cfg)
	if err != nil {
		client.Close()
		err = unavailable(ctx, "etcd "+strings.Join(cfg.Endpoints, ","), err)
		if ctx.Err() == nil {
			// The client says only that its call timed out: what each
			// endpoint does when dialled tells a wrong address or port
			// from a wrong scheme.
			err = fmt.Errorf("%w (%s)", err, diagnose(cfg.Endpoints, cfg.TLS))
		}
		return nil, err
	}
	store, err := newNames(ctx, client, sess, &cfg)
	if err != nil {
		sess.close(true)
		client.Close()
		return nil, err
	}
	reg, err := newRegistry(ctx, client, sess, &cfg)
	if err != nil {
		store.Close()
		sess.close(true)
		client.Close()
		return nil, err
	}
	return &Machine{client: client, session: sess, names: store, registry: reg}, nil
}

func (cfg *Config) fill() error {
	if len(cfg.Endpoints) == 0 {
		return errors.New("etcd: no endpoints")
	}
	for _, e := range cfg.Endpoints {
		if _, _, err := endpointAddr(e); err != nil {
			return err
		}
	}
	if err := validCluster(cfg.Cluster); err != nil {
		return err
	}
	if cfg.Machine == 0 {
		return errors.New("etcd: machine id 0; machines are numbered from 1")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 2*time.Second || cfg.TTL%time.Second != 0 {
		return fmt.Errorf("etcd: TTL %v; whole seconds, at least 2 s", cfg.TTL)
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = min(DefaultKeepAlive, cfg.TTL/3)
	}
	if cfg.KeepAlive <= 0 || cfg.KeepAlive > cfg.TTL/2 {
		return fmt.Errorf("etcd: keep-alive interval %v; more than 0 and at most TTL/2 (%v)", cfg.KeepAlive, cfg.TTL/2)
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.LateCommit == 0 {
		cfg.LateCommit = max(DefaultLateCommit, cfg.OpTimeout)
	}
	if cfg.LateCommit < cfg.OpTimeout {
		return fmt.Errorf("etcd: late-commit window %v; at least the operation timeout (%v)", cfg.LateCommit, cfg.OpTimeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return nil
}

func validCluster(name string) error {
	if len(name) == 0 || len(name) > 64 {
		return fmt.Errorf("etcd: cluster name %q; 1 to 64 bytes", name)
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return fmt.Errorf("etcd: cluster name %q; letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// Names returns the machine's view of the cluster-wide nameservice.
func (m *Machine) Names() *Names { return m.names }

// Registry returns the cluster's list of machines, where this machine
// registers itself.
func (m *Machine) Registry() *Registry { return m.registry }

// Session returns the machine's lease.
func (m *Machine) Session() *Session { return m.session }

// Close leaves the cluster cleanly: it ends the store, revokes the lease
// (so the machine's names go at once rather than after the TTL) and
// closes the connection to etcd.
// Later calls return the first call's result.
func (m *Machine) Close() error {
	m.closeOnce.Do(func() {
		m.names.Close()
		m.registry.close()
		err := m.session.close(true)
		if cerr := m.client.Close(); err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
			err = cerr
		}
		m.closeErr = err
	})
	return m.closeErr
}

// unavailable wraps err, from a request to etcd, as names.ErrUnavailable,
// unless the caller's own context ended, which is then the cause.
// endpointAddr checks an etcd endpoint as the client takes it,
// http://HOST:PORT, https://HOST:PORT or HOST:PORT (plain http), and
// returns its host:port and whether it is https.
func endpointAddr(e string) (addr string, secure bool, err error) {
	hostport := e
	if scheme, rest, ok := strings.Cut(e, "://"); ok {
		switch scheme {
		case "http":
		case "https":
			secure = true
		default:
			return "", false, fmt.Errorf("etcd: endpoint %q: scheme %q; http or https", e, scheme)
		}
		hostport = rest
	}
	host, port, err := net.SplitHostPort(hostport)
	if err == nil && host == "" {
		err = errors.New("no host")
	}
	if err == nil {
		if n, perr := strconv.Atoi(port); perr != nil || n <= 0 || n > 65535 {
			err = fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
	}
	if err != nil {
		return "", false, fmt.Errorf("etcd: endpoint %q: %v; want http://HOST:PORT, https://HOST:PORT or HOST:PORT", e, err)
	}
	return hostport, secure, nil
}

// diagnose dials each endpoint and says what it found: an address that
// refuses or does not answer, https against a server that speaks plain
// http (or the reverse), or a server that answers.
func diagnose(endpoints []string, tlsConfig *tls.Config) string {
	var out []string
	for _, e := range endpoints {
		addr, secure, _ := endpointAddr(e)
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", e, err))
			continue
		}
		if !secure {
			c.Close()
			out = append(out, fmt.Sprintf("%s: reachable, but etcd did not answer in time over plain http (an https etcd? no quorum?)", e))
			continue
		}
		cfg := &tls.Config{}
		if tlsConfig != nil {
			cfg = tlsConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(c, cfg)
		tc.SetDeadline(time.Now().Add(time.Second))
		err = tc.Handshake()
		tc.Close()
		if err != nil {
			out = append(out, fmt.Sprintf("%s: TLS: %v", e, err))
		} else {
			out = append(out, fmt.Sprintf("%s: TLS handshake done, but etcd did not answer in time (no quorum? a client certificate it refuses?)", e))
		}
	}
	return strings.Join(out, "; ")
}

func unavailable(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	return fmt.Errorf("%s: %w: %v", op, names.ErrUnavailable, err)
}

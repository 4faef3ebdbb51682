// Package member makes a monitor one machine of a cluster: it registers
// the machine in etcd under its lease (so that its names vanish with it),
// keeps its load there for placement, holds the control links to the
// other machines (interfaces/machine.if over cluster.Link), and shares the
// cluster's revocation list. 'chanos monitor --cluster' runs it (Run); a
// Go program can too. docs/cluster.md describes the model.
//
// It is a package apart from monitor so that a monitor that runs alone
// does not need etcd's client.
package member

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/cluster"
	"github.com/chanos/chanos/cluster/etcd"
	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/internal/buildinfo"
	"github.com/chanos/chanos/monitor"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// MachineIDOf derives a machine's id from its identity: the first 8 bytes
// of the SHA-256 of its Ed25519 public key, big-endian (1 if they are all
// zero). The id is stable across restarts and credentials, as long as the
// machine keeps its key, and two machines' ids collide with probability
// about n²/2⁶⁵; the registry refuses a second live machine with the same
// id (etcd.ErrMachineTaken).
func MachineIDOf(id *cluster.Identity) uint64 {
	return machineIDOfKey(id.PublicKey())
}

// machineIDOfKey is MachineIDOf of the machine whose public key is pub.
func machineIDOfKey(pub []byte) uint64 {
	sum := sha256.Sum256(pub)
	if v := binary.BigEndian.Uint64(sum[:8]); v != 0 {
		return v
	}
	return 1
}

// Member is a monitor's membership of its cluster: its place in
// etcd and its control link.
type Member struct {
	id      *cluster.Identity
	machine *etcd.Machine
	self    uint64
	log     *slog.Logger
	listen  *cluster.Listener
	lost    atomic.Pointer[func(names.Owner, string)]
	mon     *monitor.Monitor // set by start, before the links are dialled or accepted

	// revokedSelf, if set, is called once the revocation list revokes
	// this machine's own credential: Run then ends the monitor.
	revokedSelf func(error)

	mu       sync.Mutex
	links    map[uint64]*cluster.Link // outbound links, by machine id
	accepted map[uint64]*cluster.Link // inbound links, by machine id
	// creds holds the credential each machine showed on its last control
	// link, and revoked the machines a revocation list has revoked (or
	// whose credential expired) since: their connections ended then.
	// Both are made on first use.
	creds   map[uint64]*x509.Certificate
	revoked map[uint64]string
	wg      sync.WaitGroup
	stop    chan struct{}
}

// Config is what a monitor needs to be a machine of a cluster; the
// monitor's directory holds the machine's credential ('chanos cluster
// join').
type Config struct {
	// Cluster is the cluster's name: the one the machine's credential
	// names.
	Cluster string
	// Etcd lists etcd's client URLs; EtcdTLS, if not nil, is the TLS of
	// its https ones (its CA, and this machine's client certificate).
	Etcd    []string
	EtcdTLS *tls.Config
	// Listen is where the control link from other monitors listens
	// (host:port, an address they reach); none when empty.
	Listen string
	// MachineName is the machine's name for people; "": its credential's.
	MachineName string
	// LeaseTTL is how long a dead machine's names outlive its last lease
	// renewal, and KeepAlive how often it renews (0: etcd's defaults).
	LeaseTTL, KeepAlive time.Duration
	// NetAuthOnly: connections between this machine's domains and another
	// machine's that sets it too are authenticated but not encrypted
	// (trusted networks only; docs/net.md, "Without encryption").
	NetAuthOnly bool
	// Logger receives the member's log (nil: slog.Default()).
	Logger *slog.Logger
}

// Join loads the machine's identity from dir, the monitor's directory,
// registers the machine in etcd and prepares mcfg to run the monitor as a
// machine of the cluster. The caller starts the member with Start once
// the monitor exists, and closes it after the monitor has stopped; Run
// does all of it.
func Join(ctx context.Context, cf Config, dir string, mcfg *monitor.Config) (*Member, error) {
	log := cf.Logger
	if log == nil {
		log = slog.Default()
	}
	id, err := cluster.LoadIdentity(dir)
	if errors.Is(err, cluster.ErrNotJoined) || errors.Is(err, cluster.ErrNoKey) {
		return nil, fmt.Errorf("monitor: cluster mode needs this machine's credential in %s: have it admitted and run 'chanos cluster join' first (docs/cluster.md): %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("monitor: machine identity: %w", err)
	}
	// The other machines refuse a revoked machine's links and end its
	// connections: it does not take part at all, as with an expired one.
	if err := id.Revocations.Check(id.Certificate()); err != nil {
		return nil, fmt.Errorf("monitor: machine identity: %w: %w", cluster.ErrCredential, err)
	}
	if id.Cluster() != cf.Cluster {
		return nil, fmt.Errorf("monitor: this machine joined cluster %q, not %q", id.Cluster(), cf.Cluster)
	}
	c := &Member{id: id, self: MachineIDOf(id), log: log, links: map[uint64]*cluster.Link{},
		accepted: map[uint64]*cluster.Link{}, stop: make(chan struct{})}
	ecfg := etcd.Config{
		Endpoints: cf.Etcd,
		TLS:       cf.EtcdTLS,
		Cluster:   cf.Cluster,
		Machine:   c.self,
		TTL:       cf.LeaseTTL,
		KeepAlive: cf.KeepAlive,
		Logger:    log,
		OnLost: func(owner names.Owner, name string) {
			if fn := c.lost.Load(); fn != nil {
				(*fn)(owner, name)
			}
		},
	}
	c.machine, err = etcd.Open(ctx, ecfg)
	if err != nil {
		return nil, fmt.Errorf("monitor: join cluster %s: %w", cf.Cluster, err)
	}
	if cf.Listen != "" {
		c.listen, err = cluster.Listen(cf.Listen, id, &cluster.Options{Logger: log})
		if err != nil {
			c.machine.Close()
			return nil, fmt.Errorf("monitor: control link: %w", err)
		}
	}
	name := cf.MachineName
	if name == "" {
		name = id.Machine()
	}
	addr := ""
	if c.listen != nil {
		addr = c.listen.Addr().String()
	}
	info := etcd.MachineInfo{Name: name, Addr: addr, Identity: id.KeyID(), Version: buildinfo.Version()}
	if err := c.register(ctx, info); err != nil {
		c.Close()
		return nil, fmt.Errorf("monitor: register in cluster %s: %w", cf.Cluster, err)
	}
	mcfg.MachineID = c.self
	mcfg.Store = c.machine.Names()
	mcfg.SharedStore = true
	mcfg.Cluster = cf.Cluster
	mcfg.Machines = c.machines
	if addr != "" {
		mcfg.NetHost, _, _ = net.SplitHostPort(addr)
	}
	mcfg.NetAuthOnly = cf.NetAuthOnly
	log.Info("joined the cluster", "cluster", cf.Cluster, "machine", fmt.Sprintf("%016x", c.self), "name", name,
		"key_id", id.KeyID(), "control_link", addr, "lease_ttl", c.machine.Session().TTL(),
		"keep_alive", c.machine.Session().KeepAliveInterval())
	return c, nil
}

// Run runs a monitor of configuration mcfg as a machine of the cluster
// cf names until ctx ends, then leaves the cluster.
func Run(ctx context.Context, cf Config, mcfg monitor.Config) error {
	dir, err := monitor.Dir(mcfg.Dir)
	if err != nil {
		return fmt.Errorf("monitor: %w", err)
	}
	// A second monitor of the machine would find its id registered, and
	// wait for the first's lease: say at once why it cannot start.
	if c, err := seqpacket.Dial(ctx, monitor.SocketPath(dir), 64); err == nil {
		c.Close()
		return fmt.Errorf("monitor: another monitor is already running on %s: %w", monitor.SocketPath(dir), seqpacket.ErrInUse)
	}
	if cf.Logger == nil {
		cf.Logger = mcfg.Logger
	}
	member, err := Join(ctx, cf, dir, &mcfg)
	if err != nil {
		return err
	}
	defer member.Close()
	m, err := monitor.New(mcfg)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	member.revokedSelf = stop
	member.Start(m, m.Dir())
	err = m.Serve(ctx)
	if cause := context.Cause(ctx); err == nil && errors.Is(cause, cluster.ErrRevoked) {
		return fmt.Errorf("monitor: %w", cause)
	}
	return err
}

// heldLive returns the control link's address of the record that holds
// this machine's id, if a process answers there: a live monitor, not a
// previous run killed (whose port refuses), and so not worth waiting
// for. mine is this run's own address, which answers for this run. ""
// otherwise.
func (c *Member) heldLive(mine string) string {
	for _, mi := range c.machine.Registry().Machines() {
		if mi.ID != c.self || mi.Addr == "" || mi.Addr == mine {
			continue
		}
		conn, err := net.DialTimeout("tcp", mi.Addr, time.Second)
		if err != nil {
			return ""
		}
		conn.Close()
		return mi.Addr
	}
	return ""
}

// previousRunWait bounds how long a monitor waits for the record of its
// machine's previous run to expire.
const previousRunWait = time.Minute

// register puts the machine's record in the registry. The id derives from
// the machine's key, so a live record under another lease is the
// machine's previous run, killed before it could revoke its lease (or a
// copy of its key elsewhere): the monitor waits for that lease to expire,
// and only then opens its socket, so that its domains, rejoining, export
// their names again once the previous run's are gone.
func (c *Member) register(ctx context.Context, info etcd.MachineInfo) error {
	deadline := time.Now().Add(previousRunWait)
	logged := false
	for {
		err := c.machine.Registry().Register(ctx, info)
		if !errors.Is(err, etcd.ErrMachineTaken) || time.Now().After(deadline) {
			return err
		}
		if addr := c.heldLive(info.Addr); addr != "" {
			return fmt.Errorf("%w: a live monitor holds it, with its control link at %s: a copy of this machine's key? Each machine needs a key of its own ('chanos cluster join' makes one)",
				etcd.ErrMachineTaken, addr)
		}
		if !logged {
			c.log.Warn("the machine's id is still registered, by its previous run (killed?) or a copy of its key; waiting for that lease to expire",
				"machine", fmt.Sprintf("%016x", c.self), "wait_at_most", previousRunWait)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Start ties the member to the running monitor m: names lost by fencing
// go to m, the machine's load is kept up to date, the control link
// accepts peers and dials every machine of the cluster, and the
// revocation list is reread from dir when it changes.
func (c *Member) Start(m *monitor.Monitor, dir string) {
	lost := m.NameLost
	c.lost.Store(&lost)
	c.mon = m
	c.wg.Add(5)
	go c.keepLoad(m)
	go c.dialPeers()
	go c.watchRevocations(filepath.Join(dir, cluster.RevocationsFile))
	go c.shareRevocations(dir)
	go c.enforceRevocations()
	if c.listen != nil {
		c.wg.Add(1)
		go c.accept()
	}
}

// loadInterval is how often the machine's load is measured, and put in
// its record when it changed: the domain count, or the CPU use by more
// than cpuStep.
const (
	loadInterval = 2 * time.Second
	cpuStep      = 0.05
)

func (c *Member) keepLoad(m *monitor.Monitor) {
	defer c.wg.Done()
	last := etcd.Load{Domains: -1}
	prev, _ := readCPU()
	t := time.NewTicker(loadInterval)
	defer t.Stop()
	for {
		load := etcd.Load{Domains: m.Domains(), CPU: last.CPU}
		if now, err := readCPU(); err == nil {
			load.CPU = now.usedSince(prev)
			prev = now
		}
		if load.Domains != last.Domains || math.Abs(load.CPU-last.CPU) >= cpuStep {
			ctx, cancel := context.WithTimeout(context.Background(), etcd.DefaultOpTimeout)
			if err := c.machine.Registry().SetLoad(ctx, load); err == nil {
				last = load
			} else {
				c.log.Debug("cluster: update the machine's load", "err", err)
			}
			cancel()
		}
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
	}
}

// cpuTimes are the machine's CPU times, in clock ticks, from the first
// line of /proc/stat.
type cpuTimes struct{ busy, total uint64 }

func readCPU() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var t cpuTimes
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.total += n
		if i != 3 && i != 4 { // idle and iowait
			t.busy += n
		}
	}
	return t, nil
}

// usedSince returns the share of the CPUs' time that was busy between
// prev and t, from 0 to 1.
func (t cpuTimes) usedSince(prev cpuTimes) float64 {
	if t.total <= prev.total || t.busy < prev.busy {
		return 0
	}
	return min(float64(t.busy-prev.busy)/float64(t.total-prev.total), 1)
}

// accept takes the control links other machines open, and keeps each
// until it ends. Refusals are logged by the listener, with their reason.
func (c *Member) accept() {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-c.stop; cancel() }()
	for {
		link, err := c.listen.Accept(ctx)
		if err != nil {
			return
		}
		p := link.Peer()
		c.log.Info("control link accepted", "peer", p.Machine, "key_id", p.KeyID, "remote", link.RemoteAddr().String())
		pub, ok := p.Certificate.PublicKey.(ed25519.PublicKey)
		if !ok { // the handshake admits Ed25519 credentials only
			link.Close()
			continue
		}
		peer := machineIDOfKey(pub)
		c.noteCredential(peer, p.Certificate)
		// One inbound link per machine: the monitor bounds the binds in
		// progress per link (MaxPendingBinds), so a machine that opened
		// more would have more. A machine opens a new one when its old
		// one ended, which this side may not know yet: the old one goes.
		c.mu.Lock()
		old := c.accepted[peer]
		c.accepted[peer] = link
		c.mu.Unlock()
		if old != nil {
			c.log.Info("control link replaced by a newer one from the same machine", "peer", p.Machine,
				"machine", fmt.Sprintf("%016x", peer), "remote", old.RemoteAddr().String())
			old.Close()
		}
		c.wg.Add(1)
		go func() {
			c.hold(link, "accepted", peer)
			c.mu.Lock()
			if c.accepted[peer] == link {
				delete(c.accepted, peer)
			}
			c.mu.Unlock()
		}()
	}
}

// hold runs the machine protocol (interfaces/machine.if) over link until
// it ends, and logs its end. On a link this machine dialled, the monitor
// calls the peer's monitor (binds of its exports); on one it accepted, it
// serves the peer's calls.
func (c *Member) hold(link *cluster.Link, side string, peer uint64) {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn := chanos.NewConn(link, monitor.MachineInterface())
	var err error
	if side == "dialled" {
		c.mon.AddMachine(peer, conn)
		err = conn.Serve(ctx, func(_ context.Context, in *chanos.Incoming) (wire.Message, error) {
			wire.CloseCaps(in.Caps)
			return nil, conn.Violation(fmt.Errorf("machine %016x sent %s %d on the link this machine dialled, which only carries its calls", peer, in.Kind, in.Header.Msg))
		})
		c.mon.RemoveMachine(peer, conn)
	} else {
		err = c.mon.ServeMachine(ctx, peer, conn)
	}
	conn.Close()
	select {
	case <-c.stop:
	default:
		c.log.Info("control link ended", "side", side, "peer", link.Peer().Machine, "err", err)
	}
}

// redialInterval is how long the monitor waits before it dials again a
// machine whose control link failed or ended, and refusedInterval one
// that was refused (not admitted, revoked): its record must change, or
// this long pass, before the next try, so that the log says it once in a
// while rather than at every try.
const (
	redialInterval  = 5 * time.Second
	refusedInterval = time.Minute
)

// dialPeers opens a control link to every other machine of the registry
// that has an address, and again after redialInterval when one fails; a
// refusal is logged with its reason by cluster.Dial.
func (c *Member) dialPeers() {
	defer c.wg.Done()
	reg := c.machine.Registry()
	next := map[uint64]time.Time{} // when to try each machine again
	// What of its record the last try dialled: a new address or key
	// deserves a try at once; its load, which changes every few seconds,
	// does not.
	type dialled struct{ addr, identity string }
	seen := map[uint64]dialled{}
	results := make(chan dialResult, 16)
	present := map[uint64]bool{} // the machines of the registry, at the last look
	for {
		changed := reg.Changed()
		list := reg.Machines()
		now := make(map[uint64]bool, len(list))
		for _, mi := range list {
			now[mi.ID] = true
		}
		for id := range present {
			if !now[id] {
				// Its lease has expired (or it left): connections
				// with its domains end with "network lost" at once.
				c.log.Info("a machine left the cluster", "machine", fmt.Sprintf("%016x", id))
				c.mon.MachineGone(id)
				// Its control links go too: a machine outside the
				// registry neither calls nor is called; if it comes
				// back, the links are opened again.
				c.mu.Lock()
				out, in := c.links[id], c.accepted[id]
				c.mu.Unlock()
				if out != nil {
					out.Close()
				}
				if in != nil {
					in.Close()
				}
			}
		}
		present = now
		for _, mi := range list {
			if mi.ID == c.self || mi.Addr == "" {
				continue
			}
			c.mu.Lock()
			up := c.links[mi.ID] != nil
			c.mu.Unlock()
			key := dialled{mi.Addr, mi.Identity}
			if up || (seen[mi.ID] == key && time.Now().Before(next[mi.ID])) {
				continue
			}
			seen[mi.ID] = key
			next[mi.ID] = time.Now().Add(24 * time.Hour) // until the dial says
			c.wg.Add(1)
			go func() {
				r := dialResult{mi.ID, c.dial(mi)}
				select {
				case results <- r:
				case <-c.stop:
				}
			}()
		}
		select {
		case <-c.stop:
			return
		case <-changed:
		case r := <-results:
			wait := redialInterval
			if errors.Is(r.err, cluster.ErrRefused) {
				wait = refusedInterval
			}
			next[r.id] = time.Now().Add(wait)
		case <-time.After(redialInterval):
		}
	}
}

// dialResult is how a dial, and the link it made, ended.
type dialResult struct {
	id  uint64
	err error
}

// dial opens a control link to mi and holds it until it ends; it returns
// the dial's error, or nil once the link has ended.
func (c *Member) dial(mi etcd.MachineInfo) error {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-c.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	link, err := cluster.Dial(ctx, mi.Addr, c.id, &cluster.Options{Logger: c.log})
	cancel()
	if err != nil {
		c.log.Warn("control link to a machine failed", "machine", fmt.Sprintf("%016x", mi.ID), "name", mi.Name,
			"addr", mi.Addr, "reason", cluster.Reason(err), "err", err)
		return err
	}
	p := link.Peer()
	if p.KeyID != mi.Identity {
		c.log.Warn("control link refused: the machine's key is not the one its record names", "machine", fmt.Sprintf("%016x", mi.ID),
			"addr", mi.Addr, "key_id", p.KeyID, "record", mi.Identity)
		link.Close()
		return cluster.ErrWrongMachine
	}
	// A machine's id derives from its key, as on the links this machine
	// accepts: a record that pairs a key with another machine's id (any
	// admitted machine can write one while that machine is away) would
	// otherwise have this link carry the binds meant for that machine.
	if pub, ok := p.Certificate.PublicKey.(ed25519.PublicKey); !ok || machineIDOfKey(pub) != mi.ID {
		c.log.Warn("control link refused: the machine's key does not give the id its record names", "machine", fmt.Sprintf("%016x", mi.ID),
			"addr", mi.Addr, "key_id", p.KeyID)
		link.Close()
		return fmt.Errorf("control link to machine %016x: %w: its key gives another id", mi.ID, cluster.ErrWrongMachine)
	}
	c.log.Info("control link up", "peer", p.Machine, "machine", fmt.Sprintf("%016x", mi.ID), "addr", mi.Addr, "key_id", p.KeyID)
	c.noteCredential(mi.ID, p.Certificate)
	c.mu.Lock()
	c.links[mi.ID] = link
	c.mu.Unlock()
	// The machine may have left while the dial ran: dialPeers, which
	// closes the links of machines that leave, then found none. Looked at
	// after the link is recorded, the registry either still holds the
	// machine (dialPeers closes the link when it goes) or does not.
	if !c.inRegistry(mi.ID) {
		c.log.Info("control link closed: the machine left the cluster as it was dialled", "machine", fmt.Sprintf("%016x", mi.ID))
		link.Close()
	}
	c.wg.Add(1)
	c.hold(link, "dialled", mi.ID)
	c.mu.Lock()
	if c.links[mi.ID] == link {
		delete(c.links, mi.ID)
	}
	c.mu.Unlock()
	return nil
}

// inRegistry reports whether machine id is in the cluster's registry.
func (c *Member) inRegistry(id uint64) bool {
	for _, mi := range c.machine.Registry().Machines() {
		if mi.ID == id {
			return true
		}
	}
	return false
}

// revocationsPoll is how often the monitor looks for a new revocation
// list in its directory ('chanos cluster join --revocations' installs one).
const revocationsPoll = time.Second

// watchRevocations rereads the revocation list file when it changes; the
// control link then refuses the machines it revokes, and closes their
// links.
func (c *Member) watchRevocations(path string) {
	defer c.wg.Done()
	var last []byte
	if b, err := os.ReadFile(path); err == nil {
		last = b
	}
	t := time.NewTicker(revocationsPoll)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		b, err := os.ReadFile(path)
		if err != nil || bytes.Equal(b, last) {
			continue
		}
		last = b
		before := c.id.Revocations.Number()
		if err := c.id.Revocations.Update(b); err != nil {
			if !errors.Is(err, cluster.ErrStaleRevocations) {
				c.log.Warn("cluster: a revocation list in the directory was not taken", "file", path, "err", err)
			}
			continue
		}
		if before == nil || before.Cmp(c.id.Revocations.Number()) != 0 {
			c.log.Info("cluster: revocation list updated", "file", path, "number", c.id.Revocations.Number(), "revoked", len(c.id.Revocations.Serials()))
		}
	}
}

// shareRevocations shares the revocation list through etcd: a list newer
// than etcd's, installed on this machine, is published there, and a list
// newer than this machine's, published by another, is taken (and
// installed in the directory, for the next start). Only lists the root
// signed are taken (Revocations.Update checks), so whoever can write to
// etcd can delay a revocation at most, never forge or undo one.
func (c *Member) shareRevocations(dir string) {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-c.stop; cancel() }()
	var sh *etcd.Shared
	for sh == nil {
		var err error
		if sh, err = c.machine.Shared(ctx, "revocations"); err != nil {
			c.log.Warn("cluster: load the shared revocation list", "err", err)
			select {
			case <-c.stop:
				return
			case <-time.After(redialInterval):
			}
		}
	}
	defer sh.Close()
	for {
		changed, held := sh.Changed(), c.id.Revocations.Changed()
		val, rev := sh.Value()
		if len(val) > 0 {
			before := c.id.Revocations.Number()
			err := c.id.Revocations.Update(val)
			switch {
			case err == nil && (before == nil || before.Cmp(c.id.Revocations.Number()) != 0):
				c.log.Info("cluster: revocation list updated from etcd", "number", c.id.Revocations.Number(), "revoked", len(c.id.Revocations.Serials()))
				if err := cluster.InstallRevocations(dir, val); err != nil {
					c.log.Warn("cluster: store the revocation list", "err", err)
				}
			case err != nil && !errors.Is(err, cluster.ErrStaleRevocations):
				c.log.Warn("cluster: the revocation list in etcd was refused", "err", err)
			}
		}
		if mine := c.id.Revocations.Number(); mine != nil {
			theirs, err := cluster.ParseRevocations(val, c.id.Root())
			if len(val) == 0 || err != nil || theirs.Number.Cmp(mine) < 0 {
				err := sh.Replace(ctx, rev, cluster.CRLPEM(c.id.Revocations.Bytes()))
				switch {
				case err == nil:
					c.log.Info("cluster: revocation list published to etcd", "number", mine)
				case !errors.Is(err, etcd.ErrConflict) && ctx.Err() == nil:
					c.log.Warn("cluster: publish the revocation list", "err", err)
				}
				if err != nil {
					select {
					case <-c.stop:
						return
					case <-time.After(time.Second):
					}
				}
				continue
			}
		}
		select {
		case <-c.stop:
			return
		case <-changed:
		case <-held:
		}
	}
}

// noteCredential records the credential machine id showed on a control
// link: the one a revocation list is checked against. A credential newer
// than the one the machine was revoked by (it was admitted again) lifts
// the mark.
func (c *Member) noteCredential(id uint64, cert *x509.Certificate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.creds == nil {
		c.creds = map[uint64]*x509.Certificate{}
	}
	c.creds[id] = cert
	if _, ok := c.revoked[id]; ok && c.id.Revocations.Check(cert) == nil && time.Now().Before(cert.NotAfter) {
		delete(c.revoked, id)
	}
}

// enforceRevocations acts on each revocation list the machine takes, and
// on credentials that expire: a machine whose credential goes has its
// connections with this machine's domains ended (its control links end
// by themselves) and is listed as revoked; this machine's own credential
// revoked ends its monitor (Run), as a revoked machine refuses to start.
func (c *Member) enforceRevocations() {
	defer c.wg.Done()
	t := time.NewTicker(time.Second) // for expiry
	defer t.Stop()
	for {
		changed := c.id.Revocations.Changed()
		if err := c.id.Revocations.Check(c.id.Certificate()); err != nil {
			c.log.Error("cluster: this machine's credential is revoked: the monitor leaves the cluster and stops", "err", err)
			if c.revokedSelf != nil {
				c.revokedSelf(err)
			}
			return
		}
		var gone []uint64
		c.mu.Lock()
		for id, cert := range c.creds {
			if _, ok := c.revoked[id]; ok {
				continue
			}
			why := ""
			if err := c.id.Revocations.Check(cert); err != nil {
				why = "revoked"
			} else if time.Now().After(cert.NotAfter) {
				why = "expired"
			}
			if why != "" {
				if c.revoked == nil {
					c.revoked = map[uint64]string{}
				}
				c.revoked[id] = why
				gone = append(gone, id)
			}
		}
		c.mu.Unlock()
		for _, id := range gone {
			c.log.Warn("cluster: a machine's credential is no longer valid: its connections with this machine end",
				"machine", fmt.Sprintf("%016x", id), "reason", c.revokedReason(id))
			c.mon.MachineGone(id)
		}
		select {
		case <-c.stop:
			return
		case <-changed:
		case <-t.C:
		}
	}
}

// revokedReason says why machine id's credential no longer counts:
// "revoked", "expired", or "" while it does.
func (c *Member) revokedReason(id uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.revoked[id]
}

// machines lists the cluster's machines for the monitor's machines call:
// each "up", or "revoked" ("expired") once its credential went.
func (c *Member) machines() []chanos.MachineInfo {
	list := c.machine.Registry().Machines()
	out := make([]chanos.MachineInfo, 0, len(list))
	for _, mi := range list {
		state := "up"
		if why := c.revokedReason(mi.ID); why != "" {
			state = why
		}
		out = append(out, chanos.MachineInfo{ID: fmt.Sprintf("%016x", mi.ID), Name: mi.Name, Addr: mi.Addr,
			Identity: mi.Identity, Version: mi.Version, State: state, Domains: mi.Load.Domains, CPU: mi.Load.CPU})
	}
	return out
}

// Close leaves the cluster: it closes the control links and revokes the
// machine's lease, so that its names go at once.
func (c *Member) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	if c.listen != nil {
		c.listen.Close()
	}
	c.wg.Wait()
	if err := c.machine.Close(); err != nil {
		c.log.Warn("cluster: leave", "err", err)
	}
}

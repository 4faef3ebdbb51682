package monitor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interconnect/ump"
	spawnif "github.com/chanos/chanos/interfaces/spawn"
	machproto "github.com/chanos/chanos/internal/protocol/machine"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/spawn"
	"github.com/chanos/chanos/wire"
)

// The monitor hosts the spawn service (package spawn) as it hosts the
// nameservice: an export of its own, spawnd.<machine id>, whose
// connections it serves over the creator's side of a ring pair
// (docs/spawn.md).

// Limits of the spawn service's connections: per domain and in all; a
// bind beyond either is refused with limit ("resource exhausted").
const (
	spawnMaxConns      = 8
	spawnMaxTotalConns = 64
	// spawnMaxCalls caps the calls of one connection running at once:
	// wait and logs with follow block, the others run inline.
	spawnMaxCalls = 32
)

// spawnMemoryBound is what the spawn service adds to Config.MemoryBound:
// its connections, as the nameservice's (BoundNSConn: the list reply is
// as large), and for each program, running or kept, its output buffer,
// its reader's buffer, its goroutines and its exec.Cmd (spawnBoundProc: a
// kept program's reader runs on while a process that left its group
// holds its output; a forgotten one's stops); for each upload in progress
// its chunks (spawn.UploadBufferBytes).
func spawnMemoryBound(c spawn.Config) int64 {
	c = c.WithDefaults()
	return int64(spawnMaxTotalConns)*BoundNSConn +
		int64(c.MaxRunning+c.MaxKept)*int64(c.LogBytes) +
		int64(c.MaxRunning+c.MaxKept)*spawnBoundProc +
		int64(c.MaxUploads)*spawn.UploadBufferBytes
}

// spawnBoundProc: a program's reader buffer (16 KiB), its two goroutines'
// stacks, its exec.Cmd and records.
const spawnBoundProc = 64 << 10

// spawnFDBound is what the spawn service adds to Config.FDBound: five per
// connection (as the nameservice's); for each program running, the read
// end of its output pipe and its pidfd, and for each one kept, the read
// end while a process that left its group holds the pipe; for the one
// being started (the spawner thread starts them in turn) the pipe's write
// end, the limits gate's pipe and the exec's own pipe; the file of each
// upload in progress, and the cached file being checked before a spawn.
func spawnFDBound(c spawn.Config) int {
	c = c.WithDefaults()
	return 5*spawnMaxTotalConns + 2*c.MaxRunning + c.MaxKept + 5 + c.MaxUploads + 1
}

// spawnCacheDir is the directory, in the monitor's, of the cache of
// shipped programs (spawn.Config.CacheDir).
const spawnCacheDir = "spawn-cache"

// spawnClass is the class of the spawn services' names.
const spawnClass = spawnif.ServicePrefix

// monitorClass reports whether name is of the class that only monitors
// register (spawnd): a domain may neither export nor set such a name, so
// that get_count("spawnd") counts the machines that can spawn, and
// spawnd.N always names a monitor's spawn service.
func monitorClass(name string) bool {
	return names.Class(name) == spawnClass && name != spawnClass
}

// spawnHost is the monitor's spawn service.
type spawnHost struct {
	svc  *spawn.Service
	exp  *export
	name string
	// registering says that registerSpawndLater runs: it sets the name
	// once it is free.
	registering atomic.Bool

	// Under Monitor.mu.
	conns map[uint64]*spawnConn
	// byDom and total count the connections, per domain (its Domain and
	// Machine) and in all, with those of binds in progress, which take
	// their place before their ring pair is made.
	byDom  map[spawn.Caller]int
	total  int
	closed bool
	wg     sync.WaitGroup
}

// startSpawnd starts the spawn service and registers its name. Programs
// it spawns join this monitor: CHANOS_DIR names its directory.
func (m *Monitor) startSpawnd() error {
	cfg := m.cfg.Spawn
	cfg.Env = append(append([]string(nil), cfg.Env...), "CHANOS_DIR="+m.dir)
	if cfg.Logger == nil {
		cfg.Logger = m.log.With("service", "spawnd")
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(m.dir, spawnCacheDir)
	}
	if cfg.CgroupName == "" {
		// One name per monitor directory: monitors of other directories
		// do not meet, and this one's next run finds what a crash left.
		sum := sha256.Sum256([]byte(m.dir))
		cfg.CgroupName = "chanos-" + hex.EncodeToString(sum[:6])
	}
	svc, err := spawn.New(cfg)
	if err != nil {
		return err
	}
	name := spawnif.ServiceName(m.machineID)
	e, err := m.newExport(name, spawnif.InterfaceName, spawnif.MaxFrameSize, nil)
	later := false
	if err == nil {
		e.fingerprint = spawnif.Fingerprint
		err = m.store.Set(context.Background(), name, e.ref, names.Owner(SelfDomainID))
		// Taken: in a store shared with other machines, a previous run of
		// this machine may hold it until its lease expires. The service
		// runs, and the name is set once it is free.
		later = errors.Is(err, names.ErrExists)
	}
	if err != nil && !later {
		svc.Close()
		return fmt.Errorf("monitor: register the spawn service: %w", err)
	}
	m.spawnd = &spawnHost{svc: svc, exp: e, name: name, conns: map[uint64]*spawnConn{}, byDom: map[spawn.Caller]int{}}
	if later {
		m.log.Warn("the spawn service's name is taken, by an earlier run of this machine; it is set once free", "name", name)
		m.setSpawndNameLater()
	}
	return nil
}

// ownNameLost handles the loss of a name the monitor itself holds: the
// machine's lease on the cluster's store expired. The spawn service's
// name is set again once it is free, as at a start that found it taken;
// the monitor serves the service meanwhile.
func (m *Monitor) ownNameLost(name string) {
	h := m.spawnd
	if h == nil || name != h.name {
		m.log.Warn("a name of the monitor's own was lost by the store", "name", name)
		return
	}
	m.log.Warn("the store lost the spawn service's name (the machine's lease expired); it is set again once free", "name", name)
	m.setSpawndNameLater()
}

// setSpawndNameLater starts registerSpawndLater, unless it runs already
// or the monitor is closing.
func (m *Monitor) setSpawndNameLater() {
	if !m.spawnd.registering.CompareAndSwap(false, true) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.wg.Add(1)
	go m.registerSpawndLater()
}

// registerSpawndLater sets the spawn service's name once it is free,
// trying each second until the monitor stops.
func (m *Monitor) registerSpawndLater() {
	defer m.wg.Done()
	h := m.spawnd
	defer h.registering.Store(false)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		err := m.store.Set(context.Background(), h.name, h.exp.ref, names.Owner(SelfDomainID))
		switch {
		case err == nil:
			m.log.Info("the spawn service's name is set", "name", h.name)
			return
		case !errors.Is(err, names.ErrExists):
			m.log.Warn("set the spawn service's name", "name", h.name, "err", err)
		}
	}
}

// spawnExport returns the spawn service's export if id is its id.
func (m *Monitor) spawnExport(id uint64) *export {
	if h := m.spawnd; h != nil && h.exp.id == id {
		return h.exp
	}
	return nil
}

// stopSpawnd ends the spawn service's connections and its programs
// (spawn.Service.Close: SIGTERM, then SIGKILL after the grace period).
func (m *Monitor) stopSpawnd() {
	h := m.spawnd
	if h == nil {
		return
	}
	m.mu.Lock()
	h.closed = true
	conns := make([]*spawnConn, 0, len(h.conns))
	for _, c := range h.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()
	for _, c := range conns {
		c.conn.Close()
	}
	m.closeOwnNet()
	h.wg.Wait()
	h.svc.Close()
	// In a store of the monitor's own this is moot; a shared one keeps
	// the name otherwise until the machine's lease expires.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m.store.Remove(ctx, h.name, names.Owner(SelfDomainID))
}

// bindSpawnd connects s to the spawn service, within its quotas.
func (m *Monitor) bindSpawnd(s *session, rec *connRec) ([]wire.Cap, error) {
	h := m.spawnd
	key := spawn.Caller{Domain: s.id}
	m.mu.Lock()
	switch {
	case h.byDom[key] >= spawnMaxConns:
		m.mu.Unlock()
		return nil, exhausted("bind %q: this domain has %d spawn service connections, its quota", rec.name, spawnMaxConns)
	case h.total >= spawnMaxTotalConns:
		m.mu.Unlock()
		return nil, exhausted("bind %q: the monitor has %d spawn service connections, its quota", rec.name, spawnMaxTotalConns)
	}
	// The place is taken before the ring pair is made, so that binds made
	// at once cannot all pass the check; given back if the bind fails.
	h.takeLocked(key)
	m.mu.Unlock()
	u, attacher, err := m.openOwnRing(rec, spawnif.MaxFrameSize)
	if err != nil {
		m.mu.Lock()
		h.giveBackLocked(key)
		m.mu.Unlock()
		return nil, err
	}
	c := &spawnConn{
		m:    m,
		conn: chanos.NewConn(ump.NewLink(u), spawnif.Interface),
		id:   rec.id,
		sess: s,
		who:  spawn.Caller{Domain: s.id, PID: s.pid, UID: s.uid, Program: s.program},
		log:  s.log.With("conn", rec.id, "service", h.name),
	}
	m.mu.Lock()
	if m.closed || h.closed || m.domains[s.id] != s {
		h.giveBackLocked(key)
		m.mu.Unlock()
		u.Close()
		closeCaps(attacher)
		return nil, errCancelled
	}
	m.recordLocked(s, rec)
	h.conns[rec.id] = c
	h.wg.Add(1)
	m.mu.Unlock()
	go c.serve()
	return attacher, nil
}

// takeLocked counts a connection of the domain key; giveBackLocked
// forgets it.
func (h *spawnHost) takeLocked(key spawn.Caller) {
	h.byDom[key]++
	h.total++
}

func (h *spawnHost) giveBackLocked(key spawn.Caller) {
	h.total--
	if h.byDom[key]--; h.byDom[key] <= 0 {
		delete(h.byDom, key)
	}
}

// spawnConn is one connection to the spawn service; it implements
// spawnif.Server for the domain that bound it.
type spawnConn struct {
	m    *Monitor
	conn *chanos.Conn
	id   uint64
	sess *session // nil for a domain of another machine
	who  spawn.Caller
	log  *slog.Logger
	// link, for a domain of another machine, is its net connection, which
	// ends when that machine's monitor says the domain has gone.
	link *cnet.Link
}

var _ spawnif.Server = (*spawnConn)(nil)

func (c *spawnConn) serve() {
	h := c.m.spawnd
	defer h.wg.Done()
	err := spawnif.NewConn(c.conn).Serve(c.conn.Context(), c,
		chanos.ConcurrentFor(spawnMaxCalls, spawnif.MsgWait, spawnif.MsgLogs))
	if cerr := c.conn.Err(); cerr != nil {
		err = cerr
	}
	c.conn.Close()
	// A peer that stops halfway loses its own uploads, and nothing else.
	h.svc.AbortUploads(c.id)
	m := c.m
	m.mu.Lock()
	delete(h.conns, c.id)
	h.giveBackLocked(spawn.Caller{Domain: c.who.Domain, Machine: c.who.Machine})
	if rec := m.conns[c.id]; rec != nil {
		m.dropRecordLocked(rec)
	}
	m.mu.Unlock()
	switch {
	case err == nil, errors.Is(err, chanos.ErrClosed), errors.Is(err, chanos.ErrPeerDied), errors.Is(err, context.Canceled):
		c.log.Debug("spawn service connection ended", "reason", err)
	default:
		c.log.Warn("spawn service connection dropped", "err", err)
	}
}

// joined reports whether the connection's domain is still joined: a
// domain that has left the monitor may not spawn through a connection it
// kept (the nameservice's connections end with the session; these are
// refused at their next call).
func (c *spawnConn) joined() bool {
	if c.sess == nil {
		return c.conn.Err() == nil // its monitor ends the connection when it leaves
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.m.domains[c.sess.id] == c.sess
}

func detail(err error) []byte {
	b := []byte(err.Error())
	if len(b) > spawnif.MaxSpawnDetailLen {
		b = b[:spawnif.MaxSpawnDetailLen]
	}
	return b
}

// Spawn implements spawnif.Server.
func (c *spawnConn) Spawn(ctx context.Context, program string, args, env []byte, dir, cpus string, memLimit, cpuLimit uint64, cpuRate uint32, name string) (uint64, int32, wire.Errval, []byte, error) {
	if !c.joined() {
		err := fmt.Errorf("%w: domain %d has left the monitor", spawnif.ErrDenied, c.who.Domain)
		return 0, 0, spawnif.CodeDenied, detail(err), nil
	}
	st, err := c.m.spawnd.svc.Spawn(spawn.Request{
		Program: program, Args: spawnif.SplitList(args), Env: spawnif.SplitList(env),
		Dir: dir, CPUs: cpus, Mem: memLimit, CPU: cpuLimit, CPURate: cpuRate, Name: name,
	}, c.who)
	if err != nil {
		// The service logs its refusals (rate-limited, with the caller).
		return 0, 0, spawnif.Code(err), detail(err), nil
	}
	return st.ID, int32(st.PID), spawnif.CodeOK, nil, nil
}

// Wait implements spawnif.Server; ctx ends at the call's deadline.
func (c *spawnConn) Wait(ctx context.Context, id uint64) (int32, int32, wire.Errval, error) {
	c.log.Debug("spawn: wait", "call", "spawn.wait", "id", id)
	e, err := c.m.spawnd.svc.Wait(ctx, id)
	if err != nil {
		return 0, 0, spawnif.Code(err), nil
	}
	return int32(e.Code), int32(e.Signal), spawnif.CodeOK, nil
}

// Kill implements spawnif.Server.
func (c *spawnConn) Kill(ctx context.Context, id uint64, sig int32) (wire.Errval, error) {
	if !c.joined() {
		return spawnif.CodeDenied, nil
	}
	return spawnif.Code(c.m.spawnd.svc.Kill(id, syscall.Signal(sig), c.who)), nil
}

// Logs implements spawnif.Server.
func (c *spawnConn) Logs(ctx context.Context, id, from uint64, follow bool) ([]byte, uint64, bool, wire.Errval, error) {
	c.log.Debug("spawn: logs", "call", "spawn.logs", "id", id, "from", from, "follow", follow)
	data, start, done, err := c.m.spawnd.svc.Logs(ctx, id, from, spawnif.MaxLogsDataLen, follow)
	if err != nil {
		return nil, 0, false, spawnif.Code(err), nil
	}
	return data, start, done, spawnif.CodeOK, nil
}

// List implements spawnif.Server: the processes, newest first, as many
// as fit the reply.
func (c *spawnConn) List(ctx context.Context) ([]byte, error) {
	c.log.Debug("spawn: list", "call", "spawn.list")
	procs := c.m.spawnd.svc.List()
	for {
		b, err := json.Marshal(procs)
		if err != nil {
			return nil, &chanos.RemoteError{Msg: "spawn.list", Code: spawnif.CodeFailed, Detail: err.Error()}
		}
		if len(b) <= spawnif.MaxListJSONLen || len(procs) == 0 {
			return b, nil
		}
		procs = procs[:len(procs)*3/4]
	}
}

// Cached implements spawnif.Server.
func (c *spawnConn) Cached(ctx context.Context, hash string) (bool, uint64, wire.Errval, error) {
	size, ok, err := c.m.spawnd.svc.Cached(hash)
	if err != nil {
		return false, 0, spawnif.Code(err), nil
	}
	return ok, uint64(size), spawnif.CodeOK, nil
}

// PutBegin implements spawnif.Server: an upload of this connection's own.
func (c *spawnConn) PutBegin(ctx context.Context, hash string, size uint64) (uint64, bool, wire.Errval, []byte, error) {
	if !c.joined() {
		err := fmt.Errorf("%w: domain %d has left the monitor", spawnif.ErrDenied, c.who.Domain)
		return 0, false, spawnif.CodeDenied, detail(err), nil
	}
	id, present, err := c.m.spawnd.svc.PutBegin(hash, size, c.id, c.who)
	if err != nil {
		// The service logs its refusals (rate-limited, with the caller).
		return 0, false, spawnif.Code(err), detail(err), nil
	}
	return id, present, spawnif.CodeOK, nil, nil
}

// PutData implements spawnif.Server. A fault fails the upload, which
// put_end reports; the connection goes on.
func (c *spawnConn) PutData(ctx context.Context, from *spawnif.Client, m spawnif.PutData) error {
	if err := c.m.spawnd.svc.PutData(m.Upload, c.id, m.Offset, m.Data); err != nil {
		c.m.rlog.Log(slog.LevelWarn, "refused-spawn.put_data", "upload data refused", "call", "spawn.put_data",
			"domain", c.who.Domain, "conn", c.id, "upload", m.Upload, "reason", err.Error())
	}
	return nil
}

// PutEnd implements spawnif.Server.
func (c *spawnConn) PutEnd(ctx context.Context, upload uint64) (wire.Errval, []byte, error) {
	if err := c.m.spawnd.svc.PutEnd(upload, c.id); err != nil {
		return spawnif.Code(err), detail(err), nil
	}
	return spawnif.CodeOK, nil, nil
}

// PutOpen implements spawnif.Server: an upload of this connection's own,
// whose hash put_close names.
func (c *spawnConn) PutOpen(ctx context.Context, size uint64) (uint64, wire.Errval, []byte, error) {
	if !c.joined() {
		err := fmt.Errorf("%w: domain %d has left the monitor", spawnif.ErrDenied, c.who.Domain)
		return 0, spawnif.CodeDenied, detail(err), nil
	}
	id, err := c.m.spawnd.svc.PutOpen(size, c.id, c.who)
	if err != nil {
		return 0, spawnif.Code(err), detail(err), nil
	}
	return id, spawnif.CodeOK, nil, nil
}

// PutClose implements spawnif.Server.
func (c *spawnConn) PutClose(ctx context.Context, upload uint64, hash string) (bool, wire.Errval, []byte, error) {
	present, err := c.m.spawnd.svc.PutClose(upload, c.id, hash)
	if err != nil {
		return false, spawnif.Code(err), detail(err), nil
	}
	return present, spawnif.CodeOK, nil, nil
}

// SpawnShipped implements spawnif.Server.
func (c *spawnConn) SpawnShipped(ctx context.Context, hash, program string, args, env []byte, dir, cpus string, memLimit, cpuLimit uint64, cpuRate uint32, name string) (uint64, int32, wire.Errval, []byte, error) {
	if !c.joined() {
		err := fmt.Errorf("%w: domain %d has left the monitor", spawnif.ErrDenied, c.who.Domain)
		return 0, 0, spawnif.CodeDenied, detail(err), nil
	}
	st, err := c.m.spawnd.svc.SpawnShipped(hash, spawn.Request{
		Program: program, Args: spawnif.SplitList(args), Env: spawnif.SplitList(env),
		Dir: dir, CPUs: cpus, Mem: memLimit, CPU: cpuLimit, CPURate: cpuRate, Name: name,
	}, c.who)
	if err != nil {
		// The service logs its refusals (rate-limited, with the caller).
		return 0, 0, spawnif.Code(err), detail(err), nil
	}
	return st.ID, int32(st.PID), spawnif.CodeOK, nil, nil
}

// Connections from other machines' domains to the spawn service: the
// monitor accepts them itself, on a TCP listener of its own (ownNet),
// opened on NetHost the first time another machine binds spawnd.

// ownNet is the monitor's listener for connections from other machines
// to the services it serves itself.
type ownNet struct {
	L      *cnet.Listener
	grants *cnet.Grants
	addr   string
	done   chan struct{}
}

// spawnGrant is a connection to the spawn service granted to a domain of
// another machine.
type spawnGrant struct {
	rec *connRec
	who spawn.Caller
}

// ownNetListener returns the address of the monitor's own listener,
// opening it the first time.
func (m *Monitor) ownNetListener() (*ownNet, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.own != nil {
		return m.own, nil
	}
	if m.closed {
		return nil, errors.New("the monitor is shutting down")
	}
	ln, addr, err := m.listenNetHost()
	if err != nil {
		return nil, fmt.Errorf("the monitor's own: %w", err)
	}
	g := cnet.NewGrants(time.Minute, spawnMaxTotalConns, 2*time.Second)
	o := &ownNet{grants: g, addr: addr, done: make(chan struct{})}
	o.L = cnet.Listen(ln, &cnet.Options{MaxFrameSize: spawnif.MaxFrameSize, TLS: g.TLS(), Logger: m.log})
	m.own = o
	go m.acceptOwnNet(o)
	return o, nil
}

// closeOwnNet closes the monitor's own listener, if open, and waits for
// its accept loop.
func (m *Monitor) closeOwnNet() {
	m.mu.Lock()
	o := m.own
	m.mu.Unlock()
	if o == nil {
		return
	}
	o.grants.Close()
	o.L.Close()
	<-o.done
}

// acceptOwnNet serves the spawn service on each connection o accepts.
func (m *Monitor) acceptOwnNet(o *ownNet) {
	defer close(o.done)
	h := m.spawnd
	for {
		link, err := o.L.Accept(context.Background())
		if err != nil {
			return
		}
		v, ok := o.grants.Take(link.ServerName())
		if !ok {
			link.Close()
			continue
		}
		g := v.(*spawnGrant)
		o.grants.ForgetWhenGone(link)
		c := &spawnConn{
			m:    m,
			conn: chanos.NewConn(link, spawnif.Interface),
			id:   g.rec.id,
			who:  g.who,
			log:  m.log.With("conn", g.rec.id, "service", h.name, "machine", g.who.Machine, "domain", g.who.Domain),
			link: link,
		}
		key := spawn.Caller{Domain: g.who.Domain, Machine: g.who.Machine}
		m.mu.Lock()
		if m.closed || h.closed || h.byDom[key] >= spawnMaxConns || h.total >= spawnMaxTotalConns {
			m.mu.Unlock()
			link.End(interconnect.Ended(interconnect.ErrClosed, errors.New("spawn service: no room for the connection")))
			link.Close()
			continue
		}
		m.recordLocked(nil, g.rec)
		h.conns[c.id] = c
		h.takeLocked(key)
		h.wg.Add(1)
		m.mu.Unlock()
		c.log.Info("spawn service connection from another machine")
		go c.serve()
	}
}

// bindSpawndFromMachine grants a domain of machine from a connection to
// the spawn service, within its quotas, unless the spawn policy refuses
// other machines.
func (m *Monitor) bindSpawndFromMachine(from uint64, c *machproto.BindCall, e *export, label string) (*machproto.BindReply, error) {
	if m.cfg.Spawn.NoRemote {
		return nil, fail(proto.StatusDenied, "bind %s: this machine's spawn policy refuses spawns from other machines", label)
	}
	h := m.spawnd
	key := spawn.Caller{Domain: c.Client, Machine: machineText(from)}
	m.mu.Lock()
	switch {
	case h.byDom[key] >= spawnMaxConns:
		m.mu.Unlock()
		return nil, exhausted("bind %s: this domain has %d spawn service connections, its quota", label, spawnMaxConns)
	case h.total >= spawnMaxTotalConns:
		m.mu.Unlock()
		return nil, exhausted("bind %s: the monitor has %d spawn service connections, its quota", label, spawnMaxTotalConns)
	}
	m.mu.Unlock()
	o, err := m.ownNetListener()
	if err != nil {
		return nil, fail(proto.StatusInternal, "bind %s: %v", label, err)
	}
	id, err := cnet.NewIdentity()
	if err != nil {
		return nil, fail(proto.StatusInternal, "bind %s: %v", label, err)
	}
	name := serverName()
	rec := &connRec{id: m.nextConn.Add(1), name: e.name, client: c.Client, server: SelfDomainID, machine: from, inbound: true, peerConn: c.ClientConn, via: proto.InterconnectNet, export: e.id}
	who := spawn.Caller{Domain: c.Client, PID: c.ClientPID, UID: c.ClientUID, Program: c.ClientProgram, Machine: machineText(from)}
	authOnly := c.AuthOnlyOk && m.cfg.NetAuthOnly
	rec.authOnly = authOnly
	o.grants.Add(name, id, c.ClientCert, authOnly, &spawnGrant{rec: rec, who: who})
	m.log.Info("bind from another machine", "name", e.name, "iface", c.Iface, "conn", rec.id, "machine", machineText(from), "client", c.Client, "via", "net", "addr", o.addr)
	return &machproto.BindReply{
		ConnID: rec.id, Server: SelfDomainID, ExportName: e.name, MaxFrame: e.maxFrame,
		Addr: o.addr, ServerName: name, ServerCert: machproto.CertFingerprint(id.Fingerprint), AuthOnly: authOnly,
	}, nil
}

// Package netns builds a cluster of machines on one host, for tests and
// for `chanos demo --machines N`: each machine is a network namespace
// with its own address, and a bridge joins them as a switch would.
//
// The bridge lives in a namespace of its own (the switch), not in the
// host's: the host's firewall and bridge filtering then never see the
// machines' traffic, the host gains no interface (only the optional
// host link below), and deleting the cluster's namespaces removes the
// bridge and every veth with them, even those of a cluster that was
// half built.
//
// A cluster has an id, 0 to 255, held by a lock on a file that the
// kernel releases when its owner dies. Every name derives from the id:
// the namespaces are chanosnet-ID-sw (the switch) and chanosnet-ID-m1,
// -m2, ... (the machines); machine i has the address 10.213.ID.i on its
// eth0; the host link, when asked for, is the veth chanosnetIDh in the
// host's namespace, at 10.213.ID.254. Two clusters, of one process or
// of two test binaries run at once, never share an id, hence a name or a
// subnet. Sweep removes what a process that died left behind: the
// clusters whose id is no longer locked.
//
// Everything runs as root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and uses the
// ip command of iproute2; Check says when either is missing.
package netns

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Prefix starts the name of every namespace and host interface this
// package makes, so that a sweeper (Sweep, scripts/netns-clean.sh) can
// find them.
const Prefix = "chanosnet"

// MaxMachines is the most machines one cluster has: the host numbers of
// its /24 below the host link's.
const MaxMachines = 253

// Iface is each machine's interface: namespaces have their own interface
// names, so every machine's is the same.
const Iface = "eth0"

// ErrUnavailable: network namespaces cannot be built here. The errors
// below wrap it, saying why.
var ErrUnavailable = errors.New("network namespaces unavailable")

var (
	// ErrNotPrivileged: the process lacks root's capabilities.
	ErrNotPrivileged = fmt.Errorf("%w: needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)", ErrUnavailable)
	// ErrNoIP: there is no ip command, or it has no working 'ip netns'.
	ErrNoIP = fmt.Errorf("%w: needs the ip command of iproute2 with 'ip netns'", ErrUnavailable)
	// ErrNoIDs: 256 clusters already run on this host.
	ErrNoIDs = errors.New("netns: every cluster id is taken")
	// ErrClosed: the cluster was closed.
	ErrClosed = errors.New("netns: cluster closed")
)

// Options configure New.
type Options struct {
	// Machines is how many machines to build, 1 to MaxMachines.
	Machines int
	// HostLink gives the host an address on the bridge (Cluster.Host),
	// so that this process can reach the machines without entering
	// one.
	HostLink bool
	// Logger, if not nil, is told what is built, removed and swept.
	Logger *slog.Logger
}

// Cluster is a set of machines on one host, joined by a bridge.
type Cluster struct {
	// ID numbers the cluster on this host; its names and subnet derive
	// from it.
	ID int
	// Subnet is the machines' subnet, 10.213.ID.0/24.
	Subnet netip.Prefix
	// Host is the host's address on the bridge, when Options.HostLink
	// asked for one; else the zero Addr.
	Host netip.Addr
	// Machines are the machines, Machines[0] being machine 1.
	Machines []*Machine

	ip      string
	nsenter string // util-linux's nsenter, if there is one (see Command)
	log     *slog.Logger
	lock    *idLock

	mu       sync.Mutex
	closed   bool
	closeErr error
}

// Machine is one machine of a cluster: a network namespace.
type Machine struct {
	// Name is the machine's name in its cluster: m1, m2, ...
	Name string
	// NS is its network namespace, for `ip netns exec NS`.
	NS string
	// Addr is its address, on its interface Iface.
	Addr netip.Addr

	port string // its veth's end on the bridge, in the switch namespace
	c    *Cluster
}

func nsPrefix(id int) string { return fmt.Sprintf("%s-%d-", Prefix, id) }
func switchNS(id int) string { return nsPrefix(id) + "sw" }
func hostLink(id int) string { return fmt.Sprintf("%s%dh", Prefix, id) }
func subnet(id int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, byte(id), 0}), 24)
}
func hostAddr(id int, host byte) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 213, byte(id), host})
}

// hostPort is the host link's end in the switch namespace.
const hostPort = "host"

// Check reports whether clusters can be built here: nil, or an error
// that wraps ErrUnavailable and says what is missing.
func Check() error {
	_, err := check()
	return err
}

// check is Check, returning the ip command's path.
func check() (string, error) {
	ip, err := ipCommand()
	if err != nil {
		return "", err
	}
	eff, err := effectiveCaps()
	if err != nil {
		return "", fmt.Errorf("netns: reading this process's capabilities: %w", err)
	}
	const capNetAdmin, capSysAdmin = 12, 21
	if eff&(1<<capNetAdmin) == 0 || eff&(1<<capSysAdmin) == 0 {
		return "", fmt.Errorf("%w (running as uid %d)", ErrNotPrivileged, os.Getuid())
	}
	return ip, nil
}

// ipCommand returns the path of a working ip command.
func ipCommand() (string, error) {
	path, err := exec.LookPath("ip")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoIP, err)
	}
	if out, err := exec.Command(path, "netns", "list").CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s netns list: %v: %s", ErrNoIP, path, err, bytes.TrimSpace(out))
	}
	return path, nil
}

// effectiveCaps returns this process's effective capability set.
func effectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// New builds a cluster of opts.Machines machines, after sweeping what
// dead processes left behind (Sweep). The caller must Close it; if this
// process dies first, the next Sweep on the host removes it.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Machines < 1 || opts.Machines > MaxMachines {
		return nil, fmt.Errorf("netns: %d machines: want 1 to %d", opts.Machines, MaxMachines)
	}
	ip, err := check()
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, err := sweep(ctx, ip, log); err != nil {
		return nil, err
	}
	lock, err := claimID(os.Getpid())
	if err != nil {
		return nil, err
	}
	c := &Cluster{ID: lock.id, Subnet: subnet(lock.id), ip: ip, log: log, lock: lock}
	c.nsenter, _ = exec.LookPath("nsenter")
	// The id was free, so whatever bears its names is left from a dead
	// owner.
	if _, err := destroy(ctx, ip, lock.id); err != nil {
		lock.release()
		return nil, err
	}
	start := time.Now()
	if err := c.build(ctx, opts); err != nil {
		if cerr := c.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	log.Info("netns: cluster built", "id", c.ID, "machines", len(c.Machines), "subnet", c.Subnet, "took", time.Since(start))
	return c, nil
}

func (c *Cluster) build(ctx context.Context, opts Options) error {
	sw := switchNS(c.ID)
	add := []string{"netns add " + sw}
	for i := 1; i <= opts.Machines; i++ {
		m := &Machine{
			Name: fmt.Sprintf("m%d", i),
			NS:   fmt.Sprintf("%sm%d", nsPrefix(c.ID), i),
			Addr: hostAddr(c.ID, byte(i)),
			port: fmt.Sprintf("m%d", i),
			c:    c,
		}
		c.Machines = append(c.Machines, m)
		add = append(add, "netns add "+m.NS)
	}
	// Each 'netns add' alone: one may leave ip in the namespace it made.
	for _, line := range add {
		if err := c.batch(ctx, "", false, line); err != nil {
			return err
		}
	}
	lines := []string{
		"link add br0 type bridge",
		"link set br0 up",
	}
	for _, m := range c.Machines {
		lines = append(lines,
			fmt.Sprintf("link add %s type veth peer name %s netns %s", m.port, Iface, m.NS),
			fmt.Sprintf("link set %s master br0", m.port),
			fmt.Sprintf("link set %s up", m.port))
	}
	if opts.HostLink {
		c.Host = hostAddr(c.ID, 254)
		hl := hostLink(c.ID)
		if err := c.batch(ctx, "", false,
			fmt.Sprintf("link add %s type veth peer name %s netns %s", hl, hostPort, sw),
			fmt.Sprintf("addr add %s/24 dev %s", c.Host, hl),
			fmt.Sprintf("link set %s up", hl)); err != nil {
			return err
		}
		lines = append(lines,
			fmt.Sprintf("link set %s master br0", hostPort),
			fmt.Sprintf("link set %s up", hostPort))
	}
	if err := c.batch(ctx, sw, false, lines...); err != nil {
		return err
	}
	for _, m := range c.Machines {
		if err := c.batch(ctx, m.NS, false,
			"link set lo up",
			fmt.Sprintf("addr add %s/24 dev %s", m.Addr, Iface),
			fmt.Sprintf("link set %s up", Iface)); err != nil {
			return err
		}
	}
	return nil
}

// batch runs lines with `ip -batch -`, in namespace ns unless it is "";
// force goes on past a failing line.
func (c *Cluster) batch(ctx context.Context, ns string, force bool, lines ...string) error {
	return runBatch(ctx, c.ip, ns, force, lines...)
}

func runBatch(ctx context.Context, ip, ns string, force bool, lines ...string) error {
	var args []string
	if ns != "" {
		args = append(args, "-n", ns)
	}
	if force {
		args = append(args, "-force")
	}
	args = append(args, "-batch", "-")
	cmd := exec.CommandContext(ctx, ip, args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("netns: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		// A kernel without veth or bridge support cannot build machines.
		if bytes.Contains(out, []byte("Unknown device type")) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	return nil
}

// Close kills every process still in the cluster's namespaces, removes
// the namespaces, the bridge, the veths and the host link, and frees the
// id. It may be called again, and returns what the first call returned.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	c.closed = true
	// Not the caller's context: a cancelled test must still clean up.
	ctx, cancel := context.WithTimeout(context.Background(), teardownLimit)
	defer cancel()
	start := time.Now()
	killed, err := destroy(ctx, c.ip, c.ID)
	if err == nil {
		// Only once nothing is left: else the next sweep must find it.
		err = c.lock.release()
	}
	c.closeErr = err
	c.log.Info("netns: cluster removed", "id", c.ID, "processes_killed", killed, "took", time.Since(start), "err", err)
	return err
}

// Prefix is the start of the names of this cluster's namespaces.
func (c *Cluster) Prefix() string { return nsPrefix(c.ID) }

// HostLink is the name of the host link's interface in the host's
// namespace, whether or not this cluster has one.
func (c *Cluster) HostLink() string { return hostLink(c.ID) }

// SwitchNS is the namespace of the bridge.
func (c *Cluster) SwitchNS() string { return switchNS(c.ID) }

// Leftovers lists what of the cluster exists: its namespaces, its host
// link, and the processes in its namespaces ("pid N"). After Close it is
// empty.
func (c *Cluster) Leftovers() ([]string, error) { return leftovers(c.ID) }

// Command returns a command that runs name with args inside the machine:
// the process is name itself, in the machine's network namespace, with
// the host's file system, through `nsenter --net`. Without nsenter it
// goes through `ip netns exec`, which also gives the process a /sys of
// the namespace's own, where no cgroup hierarchy is mounted: a monitor
// started so offers its spawn service no cgroups. Close kills it if it
// still runs.
func (m *Machine) Command(name string, args ...string) *exec.Cmd {
	return exec.Command(m.c.runner(), append(m.c.runnerArgs(m.NS), append([]string{name}, args...)...)...)
}

// CommandContext is Command with a context, as exec.CommandContext.
func (m *Machine) CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, m.c.runner(), append(m.c.runnerArgs(m.NS), append([]string{name}, args...)...)...)
}

// runner and runnerArgs are the program, and its arguments before the
// command's, that run a command in the namespace ns.
func (c *Cluster) runner() string {
	if c.nsenter != "" {
		return c.nsenter
	}
	return c.ip
}

func (c *Cluster) runnerArgs(ns string) []string {
	if c.nsenter != "" {
		return []string{"--net=/run/netns/" + ns, "--"}
	}
	return []string{"netns", "exec", ns}
}

// Cut cuts the machine off the bridge, as if its cable were pulled at
// the switch: its veth's end on the bridge goes down, so the machine
// keeps its interface and address but sees no carrier, and nothing it
// sends reaches the others, nor theirs it. Connections are not reset:
// what is sent meanwhile is retransmitted once the machine is back.
func (m *Machine) Cut(ctx context.Context) error {
	return m.setPort(ctx, "down")
}

// Restore connects a machine that Cut cut off again.
func (m *Machine) Restore(ctx context.Context) error {
	return m.setPort(ctx, "up")
}

func (m *Machine) setPort(ctx context.Context, state string) error {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if m.c.closed {
		return fmt.Errorf("netns: %s %s: %w", m.Name, state, ErrClosed)
	}
	return m.c.batch(ctx, switchNS(m.c.ID), false, fmt.Sprintf("link set %s %s", m.port, state))
}

// Cluster is the cluster the machine belongs to.
func (m *Machine) Cluster() *Cluster { return m.c }

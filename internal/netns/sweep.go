package netns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// netnsDir is where `ip netns` keeps its namespaces.
const netnsDir = "/run/netns"

// LockDir holds a lock file per cluster id: ID.lock, locked (flock) by
// the process that owns the cluster, and holding its pid. The kernel
// releases the lock when the owner dies, which tells a sweeper that the
// cluster's remains are no one's.
const LockDir = "/run/chanos-netns"

// maxIDs is how many clusters a host holds at once: one /24 each in
// 10.213.0.0/16.
const maxIDs = 256

// teardownLimit bounds Close: killing the processes and removing the
// namespaces take milliseconds; a process that does not die by then is
// stuck in the kernel, and Close says so.
const teardownLimit = 30 * time.Second

// idLock is a held cluster id.
type idLock struct {
	id   int
	f    *os.File
	path string
}

func lockPath(id int) string { return filepath.Join(LockDir, fmt.Sprintf("%d.lock", id)) }

// claimID locks the first free id, starting from one derived from pid so
// that processes started together rarely try the same ones.
func claimID(pid int) (*idLock, error) {
	start := pid % maxIDs
	for k := range maxIDs {
		l, err := tryLock((start + k) % maxIDs)
		if err != nil {
			return nil, err
		}
		if l != nil {
			fmt.Fprintf(l.f, "%d\n", os.Getpid())
			return l, nil
		}
	}
	return nil, ErrNoIDs
}

// tryLock locks id's lock file, or returns nil if another process holds
// it.
func tryLock(id int) (*idLock, error) {
	if err := os.MkdirAll(LockDir, 0o700); err != nil {
		return nil, fmt.Errorf("netns: lock directory: %w", err)
	}
	path := lockPath(id)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("netns: lock for cluster %d: %w", id, err)
		}
		fd := int(f.Fd())
		if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, nil
			}
			return nil, fmt.Errorf("netns: locking %s: %w", path, err)
		}
		// The lock counts only if the path still names the file locked:
		// a releaser removes the file before it lets go, and a process
		// that opened it before then locks a file no one else sees.
		var held, named syscall.Stat_t
		if syscall.Fstat(fd, &held) == nil && syscall.Stat(path, &named) == nil &&
			held.Dev == named.Dev && held.Ino == named.Ino {
			f.Truncate(0)
			return &idLock{id: id, f: f, path: path}, nil
		}
		f.Close()
	}
}

// release frees the id: the file goes first, then the lock.
func (l *idLock) release() error {
	err := os.Remove(l.path)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	l.f.Close()
	if err != nil {
		return fmt.Errorf("netns: removing lock of cluster %d: %w", l.id, err)
	}
	return nil
}

// namespaces returns the names of cluster id's namespaces that exist.
func namespaces(id int) ([]string, error) {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns: listing namespaces: %w", err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), nsPrefix(id)) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// linkExists reports whether the host's namespace has an interface name.
func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// pidsIn returns the processes whose network namespace is one of nss,
// this process excepted: a goroutine in Machine.Do may have its thread,
// the main one among them, in a machine.
func pidsIn(nss []string) []int {
	type key struct{ dev, ino uint64 }
	want := map[key]bool{}
	for _, ns := range nss {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(netnsDir, ns), &st) == nil {
			want[key{st.Dev, st.Ino}] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		// A process that ended, a zombie among them, has no namespace.
		if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && want[key{st.Dev, st.Ino}] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killIn kills every process in nss, until none is left, and returns how
// many it killed.
func killIn(ctx context.Context, nss []string) (int, error) {
	killed := map[int]bool{}
	for {
		pids := pidsIn(nss)
		if len(pids) == 0 {
			return len(killed), nil
		}
		if ctx.Err() != nil {
			return len(killed), fmt.Errorf("netns: processes %v still in %v: %w", pids, nss, ctx.Err())
		}
		for _, p := range pids {
			if syscall.Kill(p, syscall.SIGKILL) == nil {
				killed[p] = true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// destroy removes everything of cluster id that exists: it kills the
// processes in its namespaces, then removes the host link and the
// namespaces (the bridge and the machines' veths go with them). It
// returns how many processes it killed, and fails if anything is left.
func destroy(ctx context.Context, ip string, id int) (int, error) {
	nss, err := namespaces(id)
	if err != nil {
		return 0, err
	}
	killed, err := killIn(ctx, nss)
	if err != nil {
		return killed, err
	}
	var errs []error
	// Deleting one end of a veth deletes both, at once; a namespace's
	// own devices go when the kernel frees it, which it does once no
	// process and no mount holds it.
	if hl := hostLink(id); linkExists(hl) {
		errs = append(errs, runBatch(ctx, ip, "", false, "link del "+hl))
	}
	if len(nss) > 0 {
		lines := make([]string, len(nss))
		for i, ns := range nss {
			lines[i] = "netns del " + ns
		}
		errs = append(errs, runBatch(ctx, ip, "", true, lines...))
	}
	if err := errors.Join(errs...); err != nil {
		return killed, err
	}
	left, err := leftovers(id)
	if err == nil && len(left) > 0 {
		err = fmt.Errorf("netns: cluster %d: left after removal: %s", id, strings.Join(left, ", "))
	}
	return killed, err
}

// leftovers lists what of cluster id exists.
func leftovers(id int) ([]string, error) {
	nss, err := namespaces(id)
	if err != nil {
		return nil, err
	}
	left := slices.Clone(nss)
	if hl := hostLink(id); linkExists(hl) {
		left = append(left, hl)
	}
	for _, p := range pidsIn(nss) {
		left = append(left, fmt.Sprintf("pid %d", p))
	}
	return left, nil
}

// Sweep removes the remains of clusters whose owner died without
// closing them (killed, or crashed): their namespaces, host links,
// processes and lock files. It leaves the clusters of live processes
// alone, so it is safe while other tests run. It returns what it
// removed. New sweeps before it builds.
func Sweep(ctx context.Context, log *slog.Logger) ([]string, error) {
	ip, err := check()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return sweep(ctx, ip, log)
}

func sweep(ctx context.Context, ip string, log *slog.Logger) ([]string, error) {
	ids, err := remains()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, id := range ids {
		l, err := tryLock(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if l == nil {
			continue // a live cluster
		}
		fmt.Fprintf(l.f, "%d sweeping\n", os.Getpid())
		left, _ := leftovers(id)
		killed, err := destroy(ctx, ip, id)
		if err != nil {
			l.f.Close()
			errs = append(errs, err)
			continue
		}
		errs = append(errs, l.release())
		if len(left) > 0 {
			log.Info("netns: swept the remains of a dead cluster", "id", id, "removed", left, "processes_killed", killed)
		}
		removed = append(removed, left...)
	}
	return removed, errors.Join(errs...)
}

// remains returns the ids of which something exists on this host: a
// namespace, a host link or a lock file.
func remains() ([]int, error) {
	var ids []int
	add := func(s string) {
		if id, err := strconv.Atoi(s); err == nil && id >= 0 && id < maxIDs && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	ents, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("netns: listing namespaces: %w", err)
	}
	for _, e := range ents {
		if rest, ok := strings.CutPrefix(e.Name(), Prefix+"-"); ok {
			if id, _, ok := strings.Cut(rest, "-"); ok {
				add(id)
			}
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("netns: listing interfaces: %w", err)
	}
	for _, i := range ifs {
		if rest, ok := strings.CutPrefix(i.Name, Prefix); ok {
			if id, ok := strings.CutSuffix(rest, "h"); ok {
				add(id)
			}
		}
	}
	locks, err := os.ReadDir(LockDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("netns: listing locks: %w", err)
	}
	for _, e := range locks {
		if id, ok := strings.CutSuffix(e.Name(), ".lock"); ok {
			add(id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

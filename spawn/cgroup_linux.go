package spawn

// The cgroup layer of --limit (docs/spawn.md, "How a program is
// started"): at its start the service finds which cgroups the machine
// offers it, cgroup v2 with the memory and cpu controllers or cgroup v1
// with writable memory and cpu hierarchies, by making a parent cgroup of
// its own under the monitor's cgroup in each hierarchy it uses, which it
// then removes until a program needs it: a monitor that never limits a
// program leaves nothing behind, even if it is killed. A program with a
// memory or CPU-rate limit gets a cgroup of its own under that parent,
// entered before the program's first instruction and removed once the
// program has been reaped; the parent goes when the service closes.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cfsPeriod is the CPU bandwidth period, in microseconds, that a CPU-rate
// limit is a share of: the kernel's default.
const cfsPeriod = 100000

// MinCPURate is the smallest CPU-rate limit, in thousandths of a CPU: the
// kernel's smallest quota is 1 ms per period.
const MinCPURate = 1000 * 1000 / cfsPeriod

// cgroups is what the machine offers the service.
type cgroups struct {
	version int    // 1 or 2; 0: none, and why says why
	why     string // why there are none, for the details of refusals
	// mem and cpu are the directories of the service's parent cgroup in
	// the memory and the cpu hierarchies (the same one in v2).
	mem, cpu string
	tag      string // ends every program cgroup's name: one service's apart from a leftover's

	mu     sync.Mutex
	made   bool // the parent cgroups are there
	closed bool // close has run: no more program cgroups
}

// errCgroupsClosed: the service is closing, and makes no more cgroups.
var errCgroupsClosed = errors.New("the spawn service is closing")

// label names the mechanism: "cgroup v1", "cgroup v2" or "rlimit".
func (c *cgroups) label() string {
	if c.version == 0 {
		return "rlimit"
	}
	return "cgroup v" + strconv.Itoa(c.version)
}

// cgMount is a cgroup file system mounted here, from /proc/self/mountinfo.
type cgMount struct {
	root  string // the cgroup that is the mount's root
	point string // where it is mounted
	v2    bool
	opts  []string // super options: a v1 hierarchy's controllers among them
}

// openCgroups finds the cgroups the machine offers and makes the parent
// cgroup name under the monitor's own: v2 where its memory and cpu
// controllers can be delegated, else v1 where the memory and cpu
// hierarchies are writable, else none (why says why). A parent of that
// name left by a monitor that crashed is taken over, its empty program
// cgroups removed.
func openCgroups(name string) *cgroups {
	mounts, err := readCgMounts()
	if err != nil {
		return &cgroups{why: err.Error()}
	}
	own, err := readOwnCgroups()
	if err != nil {
		return &cgroups{why: err.Error()}
	}
	var tag [4]byte
	rand.Read(tag[:])
	c := &cgroups{tag: hex.EncodeToString(tag[:])}
	var whys []string
	if dir, err := openV2(mounts, own, name); err == nil {
		c.version, c.mem, c.cpu = 2, dir, dir
	} else {
		whys = append(whys, err.Error())
		if mem, cpu, err := openV1(mounts, own, name); err == nil {
			c.version, c.mem, c.cpu = 1, mem, cpu
		} else {
			whys = append(whys, err.Error())
		}
	}
	if c.version == 0 {
		c.why = strings.Join(whys, "; ")
		return c
	}
	// Made to know they can be, and gone until a program needs them (one
	// a crashed monitor's program still holds stays).
	c.made = c.removeParents() != nil
	return c
}

// ensureParents makes the parent cgroups, if they are not there.
func (c *cgroups) ensureParents() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errCgroupsClosed
	}
	if c.made {
		return nil
	}
	for _, d := range []string{c.mem, c.cpu} {
		if err := syscall.Mkdir(d, 0o755); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("make the cgroup %s: %w", d, err)
		}
	}
	if c.version == 2 {
		if err := enableControllers(c.mem); err != nil {
			return err
		}
	}
	c.made = true
	return nil
}

// removeParents removes the parent cgroups, which must be empty by now.
func (c *cgroups) removeParents() error {
	err := removeParent(c.mem)
	if c.cpu != c.mem {
		err = errors.Join(err, removeParent(c.cpu))
	}
	return err
}

// readCgMounts reads the cgroup mounts of /proc/self/mountinfo.
func readCgMounts() ([]cgMount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	return parseCgMounts(b), nil
}

// parseCgMounts parses the cgroup mounts of a mountinfo file.
func parseCgMounts(b []byte) []cgMount {
	var out []cgMount
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// ID parent major:minor root point options [optional...] - type source super
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		typ := f[sep+1]
		if typ != "cgroup" && typ != "cgroup2" {
			continue
		}
		out = append(out, cgMount{root: unescapeMount(f[3]), point: unescapeMount(f[4]), v2: typ == "cgroup2",
			opts: strings.Split(f[sep+3], ",")})
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroups is where this process is, from /proc/self/cgroup: the v2
// path, and the v1 path of each controller.
type ownCgroups struct {
	v2    string
	hasV2 bool
	v1    map[string]string
}

func readOwnCgroups() (ownCgroups, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ownCgroups{}, fmt.Errorf("cgroups: %w", err)
	}
	return parseOwnCgroups(b), nil
}

// parseOwnCgroups parses a /proc/PID/cgroup file.
func parseOwnCgroups(b []byte) ownCgroups {
	own := ownCgroups{v1: map[string]string{}}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			own.v2, own.hasV2 = parts[2], true
			continue
		}
		for ctl := range strings.SplitSeq(parts[1], ",") {
			own.v1[ctl] = parts[2]
		}
	}
	return own
}

// ownDir is the directory of the cgroup path in mount m: the path is
// relative to the hierarchy's root (or the cgroup namespace's), the
// mount shows it from m.root down. A path outside what m shows (a
// container given only its own cgroup) is taken as m's root.
func ownDir(m cgMount, path string) string {
	rel, ok := strings.CutPrefix(path, m.root)
	if m.root == "/" {
		rel, ok = path, true
	}
	if ok && (rel == "" || strings.HasPrefix(rel, "/")) {
		dir := filepath.Join(m.point, rel)
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir
		}
	}
	return m.point
}

// openV2 makes the parent cgroup in the v2 hierarchy, with the memory
// and cpu controllers enabled for its children.
func openV2(mounts []cgMount, own ownCgroups, name string) (string, error) {
	i := slices.IndexFunc(mounts, func(m cgMount) bool { return m.v2 })
	if i < 0 || !own.hasV2 {
		return "", errors.New("no cgroup v2 hierarchy")
	}
	dir := ownDir(mounts[i], own.v2)
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return "", fmt.Errorf("cgroup v2: %w", err)
	}
	ctls := strings.Fields(string(b))
	if !slices.Contains(ctls, "memory") || !slices.Contains(ctls, "cpu") {
		return "", fmt.Errorf("cgroup v2 at %s: the memory and cpu controllers are not available (it has %q)", mounts[i].point, ctls)
	}
	// The controllers must be on in the monitor's cgroup for its children;
	// the kernel refuses that in a cgroup other than the root that has
	// processes of its own, as the monitor's has: the monitor then needs a
	// delegated subtree whose controllers are on (systemd's Delegate=).
	if err := enableControllers(dir); err != nil {
		return "", fmt.Errorf("cgroup v2: %w (run the monitor in a delegated cgroup with the memory and cpu controllers on)", err)
	}
	parent := filepath.Join(dir, name)
	if err := makeParent(parent); err != nil {
		return "", fmt.Errorf("cgroup v2: %w", err)
	}
	if err := enableControllers(parent); err != nil {
		syscall.Rmdir(parent)
		return "", fmt.Errorf("cgroup v2: %w", err)
	}
	return parent, nil
}

// enableControllers turns the memory and cpu controllers on for dir's
// children, where they are not yet.
func enableControllers(dir string) error {
	file := filepath.Join(dir, "cgroup.subtree_control")
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	on := strings.Fields(string(b))
	for _, ctl := range []string{"memory", "cpu"} {
		if slices.Contains(on, ctl) {
			continue
		}
		if err := writeFile(file, "+"+ctl); err != nil {
			return err
		}
	}
	return nil
}

// openV1 makes the parent cgroup in the v1 memory and cpu hierarchies.
func openV1(mounts []cgMount, own ownCgroups, name string) (mem, cpu string, err error) {
	dirOf := func(ctl string) (string, error) {
		i := slices.IndexFunc(mounts, func(m cgMount) bool { return !m.v2 && slices.Contains(m.opts, ctl) })
		if i < 0 {
			return "", fmt.Errorf("no cgroup v1 %s hierarchy", ctl)
		}
		return ownDir(mounts[i], own.v1[ctl]), nil
	}
	memOwn, err := dirOf("memory")
	if err != nil {
		return "", "", err
	}
	cpuOwn, err := dirOf("cpu")
	if err != nil {
		return "", "", err
	}
	mem, cpu = filepath.Join(memOwn, name), filepath.Join(cpuOwn, name)
	if err := makeParent(mem); err != nil {
		return "", "", fmt.Errorf("cgroup v1: %w", err)
	}
	if cpu != mem {
		if err := makeParent(cpu); err != nil {
			syscall.Rmdir(mem)
			return "", "", fmt.Errorf("cgroup v1: %w", err)
		}
	}
	for _, f := range []string{filepath.Join(mem, "memory.limit_in_bytes"), filepath.Join(cpu, "cpu.cfs_quota_us")} {
		if _, err := os.Stat(f); err != nil {
			removeParent(mem)
			removeParent(cpu)
			return "", "", fmt.Errorf("cgroup v1: %w", err)
		}
	}
	return mem, cpu, nil
}

// makeParent makes the parent cgroup dir, or takes over the one a
// crashed monitor of the same name left: its program cgroups that are
// empty go (one whose program still runs stays).
func makeParent(dir string) error {
	err := syscall.Mkdir(dir, 0o755)
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	ents, rerr := os.ReadDir(dir)
	if rerr != nil {
		return fmt.Errorf("read %s: %w", dir, rerr)
	}
	for _, e := range ents {
		if e.IsDir() {
			syscall.Rmdir(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

// removeParent removes a parent cgroup, which must be empty by now.
func removeParent(dir string) error {
	if err := rmdirCgroup(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("remove the cgroup %s: %w", dir, err)
	}
	return nil
}

// rmdirCgroup removes an empty cgroup. A cgroup whose last process has
// just been reaped may read as busy for a moment (v2 updates its
// population lazily): it is tried for up to 100 ms.
func rmdirCgroup(dir string) error {
	var err error
	for try := 0; try < 20; try++ {
		if err = syscall.Rmdir(dir); !errors.Is(err, syscall.EBUSY) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return err
}

// close removes the parent cgroups, and makes make refuse from now on.
func (c *cgroups) close() error {
	if c.version == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.made = false
	return c.removeParents()
}

// progCgroup is the cgroup of one program: a directory in each hierarchy
// its limits need.
type progCgroup struct {
	c      *cgroups
	dirs   []string
	memDir string // the one with the memory controller, or ""
}

// make makes the cgroup of program id with a memory limit of mem bytes
// and a CPU rate of rate thousandths of a CPU (0: none).
func (c *cgroups) make(id uint64, mem uint64, rate uint32) (*progCgroup, error) {
	if err := c.ensureParents(); err != nil {
		return nil, err
	}
	leaf := strconv.FormatUint(id, 10) + "-" + c.tag
	pc := &progCgroup{c: c}
	add := func(parent string) (string, error) {
		dir := filepath.Join(parent, leaf)
		if slices.Contains(pc.dirs, dir) {
			return dir, nil
		}
		if err := syscall.Mkdir(dir, 0o755); err != nil {
			return "", fmt.Errorf("make the cgroup %s: %w", dir, err)
		}
		pc.dirs = append(pc.dirs, dir)
		return dir, nil
	}
	err := func() error {
		if mem > 0 {
			dir, err := add(c.mem)
			if err != nil {
				return err
			}
			pc.memDir = dir
			v := strconv.FormatUint(mem, 10)
			if c.version == 2 {
				if err := writeFile(filepath.Join(dir, "memory.max"), v); err != nil {
					return err
				}
				// No swap to escape to, and the program's children die
				// with it when it is over.
				if err := writeIfPresent(filepath.Join(dir, "memory.swap.max"), "0"); err != nil {
					return err
				}
				if err := writeIfPresent(filepath.Join(dir, "memory.oom.group"), "1"); err != nil {
					return err
				}
			} else {
				// memsw (memory and swap) may not go below the memory limit:
				// that first.
				if err := writeFile(filepath.Join(dir, "memory.limit_in_bytes"), v); err != nil {
					return err
				}
				if err := writeIfPresent(filepath.Join(dir, "memory.memsw.limit_in_bytes"), v); err != nil {
					return err
				}
			}
		}
		if rate > 0 {
			dir, err := add(c.cpu)
			if err != nil {
				return err
			}
			quota := uint64(rate) * cfsPeriod / 1000
			if c.version == 2 {
				return writeFile(filepath.Join(dir, "cpu.max"), strconv.FormatUint(quota, 10)+" "+strconv.Itoa(cfsPeriod))
			}
			if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(cfsPeriod)); err != nil {
				return err
			}
			return writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatUint(quota, 10))
		}
		return nil
	}()
	if err != nil {
		pc.remove()
		return nil, err
	}
	return pc, nil
}

// enter moves process pid into the cgroup.
func (pc *progCgroup) enter(pid int) error {
	for _, d := range pc.dirs {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// oomKills returns how many processes the kernel's OOM killer has killed
// in the cgroup.
func (pc *progCgroup) oomKills() uint64 {
	if pc.memDir == "" {
		return 0
	}
	// v2 counts them in memory.events, v1 in memory.oom_control.
	for _, f := range []string{"memory.events", "memory.oom_control"} {
		b, err := os.ReadFile(filepath.Join(pc.memDir, f))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
	}
	return 0
}

// killAll sends SIGKILL to the processes left in the cgroup: what the
// program started and left behind.
func (pc *progCgroup) killAll() {
	for _, d := range pc.dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for f := range strings.FieldsSeq(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// remove removes the cgroup, which its processes must have left.
func (pc *progCgroup) remove() error {
	var errs []error
	left := pc.dirs[:0]
	for _, d := range pc.dirs {
		if err := rmdirCgroup(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove the cgroup %s: %w", d, err))
			left = append(left, d)
		}
	}
	pc.dirs = left
	// A spawn that made its cgroup as the service closed: the parents
	// could not go then, and can now.
	pc.c.mu.Lock()
	if pc.c.closed && len(left) == 0 {
		pc.c.removeParents()
	}
	pc.c.mu.Unlock()
	return errors.Join(errs...)
}

// writeFile writes v to a cgroup file, which exists.
func writeFile(file, v string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", v, file, err)
	}
	return nil
}

// writeIfPresent is writeFile for a file that a kernel may lack (one
// without swap accounting, say).
func writeIfPresent(file, v string) error {
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return writeFile(file, v)
}

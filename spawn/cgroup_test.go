package spawn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/internal/testkit"
)

// hogEnv makes this test binary, spawned by a test, a program that uses
// what a limit bounds instead of running the tests: "mem:MB" allocates
// and touches MB MiB, then says "survived"; "spin:MS" keeps a CPU busy
// for MS milliseconds of wall time. Either first prints its cgroups.
const hogEnv = "CHANOS_SPAWN_TEST_HOG"

func TestMain(m *testing.M) {
	if h := os.Getenv(hogEnv); h != "" {
		os.Exit(hog(h))
	}
	os.Exit(m.Run())
}

var sink [][]byte

func hog(how string) int {
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		os.Stdout.Write(b)
	}
	kind, arg, _ := strings.Cut(how, ":")
	n, err := strconv.Atoi(arg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hog:", err)
		return 2
	}
	switch kind {
	case "mem":
		for range n {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			sink = append(sink, b)
		}
		fmt.Println("survived")
	case "spin":
		end := time.Now().Add(time.Duration(n) * time.Millisecond)
		x := 0
		for time.Now().Before(end) {
			for i := range 10000 {
				x += i
			}
		}
		fmt.Println(x > 0)
	default:
		return 2
	}
	return 0
}

// hogRequest is a Request to run this binary as hog how.
func hogRequest(t *testing.T, how string) Request {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Request{Program: exe, Env: []string{hogEnv + "=" + how}}
}

// requireCgroups skips the test where the machine offers s no cgroups,
// and fails it there under CI: CI's machines offer cgroup v1 to root.
func requireCgroups(t *testing.T, s *Service) {
	t.Helper()
	if s.cg.version != 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("no cgroups for the spawn service (%s): CI's machines offer them to root", s.cg.why)
	}
	t.Skipf("this machine offers the spawn service no cgroups (%s): the tests of cgroup limits need cgroup v2 with the memory and cpu controllers delegated, or writable cgroup v1 memory and cpu hierarchies (root)", s.cg.why)
}

// progDirs returns the directories the cgroup of program id has or would
// have in s's hierarchies.
func progDirs(s *Service, id uint64) []string {
	leaf := strconv.FormatUint(id, 10) + "-" + s.cg.tag
	dirs := []string{filepath.Join(s.cg.mem, leaf)}
	if s.cg.cpu != s.cg.mem {
		dirs = append(dirs, filepath.Join(s.cg.cpu, leaf))
	}
	return dirs
}

func mustBeGone(t *testing.T, what string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s %s is still there (%v)", what, d, err)
		}
	}
}

// A program over its memory limit is killed by the kernel's OOM killer,
// in its cgroup, which it was in from its first instruction; the cgroup
// goes once the program has been reaped.
func TestCgroupMemoryLimit(t *testing.T) {
	s := newService(t, Config{})
	requireCgroups(t, s)
	r := hogRequest(t, "mem:256")
	r.Mem, r.CPU = 64<<20, 60
	out, e := run(t, s, r)
	if e.Signal != syscall.SIGKILL {
		t.Fatalf("a program allocating 256 MiB under mem=64M: %v, want killed by SIGKILL; output:\n%s", e, out)
	}
	leaf := "/" + strconv.FormatUint(1, 10) + "-" + s.cg.tag
	if !strings.Contains(out, leaf+"\n") {
		t.Errorf("the program's /proc/self/cgroup has no cgroup ending %s:\n%s", leaf, out)
	}
	p := s.List()[0]
	if want := s.cg.label() + ", rlimit"; p.Limits != want || !p.OOMKilled {
		t.Errorf("list: limits %q, oom_killed %v; want %q, true", p.Limits, p.OOMKilled, want)
	}
	mustBeGone(t, "the ended program's cgroup", progDirs(s, 1)...)

	// Within its limit the same program runs to its end.
	r = hogRequest(t, "mem:16")
	r.Mem = 128 << 20
	if out, e := run(t, s, r); e.Code != 0 || e.Signal != 0 || !strings.Contains(out, "survived") {
		t.Fatalf("16 MiB under mem=128M: %v, output:\n%s", e, out)
	}
}

// A CPU-rate limit bounds a busy program's CPU time to about its share of
// the wall time.
func TestCgroupCPURate(t *testing.T) {
	s := newService(t, Config{})
	requireCgroups(t, s)
	r := hogRequest(t, "spin:1000")
	r.CPURate = 200
	st, err := s.Spawn(r, Caller{Domain: 7})
	if err != nil {
		t.Fatal(err)
	}
	dir := progDirs(s, st.ID)[len(progDirs(s, st.ID))-1]
	var quota string
	if s.cg.version == 2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		quota = strings.TrimSpace(string(b))
		if err != nil || quota != "20000 100000" {
			t.Errorf("cpu.max %q (%v), want 20000 100000", quota, err)
		}
	} else {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		quota = strings.TrimSpace(string(b))
		if err != nil || quota != "20000" {
			t.Errorf("cpu.cfs_quota_us %q (%v), want 20000", quota, err)
		}
	}
	e, err := s.Wait(ctxFor(t), st.ID)
	if err != nil || e.Code != 0 {
		t.Fatalf("wait: %v, %v", e, err)
	}
	p := s.List()[0]
	t.Logf("CPU time under cpu-rate=0.2 for 1 s of wall time: %.3f s", p.CPUSeconds)
	// 0.2 of a CPU for about 1 s, and the start: well under 0.35 s.
	if p.CPUSeconds > 0.35 {
		t.Errorf("a busy program under cpu-rate=0.2 for 1 s used %.3f s of CPU, want at most 0.35", p.CPUSeconds)
	}
	if p.CPURate != 0.2 || p.Limits != s.cg.label() {
		t.Errorf("list: cpu_rate %v, limits %q; want 0.2, %q", p.CPURate, p.Limits, s.cg.label())
	}
	mustBeGone(t, "the ended program's cgroup", progDirs(s, st.ID)...)
}

// Close removes the service's parent cgroup, after the program cgroups
// that processes a program left behind still held (those are killed); a
// parent of the same name that a crashed monitor left is taken over, its
// empty program cgroups removed; the parent is there only once a program
// has needed it.
func TestCgroupCleanup(t *testing.T) {
	name := fmt.Sprintf("chanos-test-%d-cleanup", os.Getpid())
	left := openCgroups(name) // as a monitor that crashed leaves it
	if left.version == 0 {
		requireCgroups(t, &Service{cg: left})
	}
	t.Cleanup(func() { left.close() }) // a no-op once the service's Close has removed it
	if err := left.ensureParents(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(left.mem, "3-deadbeef")
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Rmdir(stale) })

	s, err := New(Config{CgroupName: name, Grace: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
	if s.cg.mem != left.mem {
		t.Fatalf("the service's parent cgroup %s, want the leftover %s", s.cg.mem, left.mem)
	}
	mustBeGone(t, "a crashed monitor's empty program cgroup", stale)
	// The parent is made when a program needs it, and not before: a
	// monitor that limits nothing leaves nothing, even when killed.
	mustBeGone(t, "before any program with limits, the service's cgroup", s.cg.mem, s.cg.cpu)
	if _, e := run(t, s, Request{Program: "/bin/true"}); e.Code != 0 {
		t.Fatalf("/bin/true: %v", e)
	}
	mustBeGone(t, "after a program without limits, the service's cgroup", s.cg.mem, s.cg.cpu)

	// A program that leaves a process behind, in its cgroup (out of its
	// process group, before it ends: what stays in the group is killed
	// with the program), and one still running at Close.
	r := Request{Program: "/bin/sh", Args: []string{"-c",
		`setsid sleep 100 </dev/null >/dev/null 2>&1 & p=$!; until [ "$(cut -d' ' -f6 /proc/$p/stat)" = $p ]; do sleep 0.01; done; echo $p`},
		Mem: 64 << 20, CPURate: 500}
	out, e := run(t, s, r)
	orphan, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || e.Code != 0 {
		t.Fatalf("the program that leaves a process: %v, output %q", e, out)
	}
	t.Cleanup(func() { syscall.Kill(orphan, syscall.SIGKILL) })
	live, err := s.Spawn(Request{Program: "sleep", Args: []string{"100"}, Mem: 64 << 20, CPURate: 500}, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	dirs := append(progDirs(s, 2), progDirs(s, live.ID)...)
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("a program cgroup that should still be there: %v", err)
		}
	}
	s.Close()
	closed = true
	mustBeGone(t, "after Close, a program cgroup", dirs...)
	mustBeGone(t, "after Close, the service's cgroup", s.cg.mem, s.cg.cpu)
	testkit.Eventually(t, "the left process killed", func() bool {
		return syscall.Kill(orphan, 0) != nil || processState(orphan) == "Z"
	})
}

// processState returns the state letter of pid from /proc ("" if gone).
func processState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+3 > len(b) {
		return ""
	}
	return string(b[i+2 : i+3])
}

// Without cgroups a CPU-rate limit is refused as unavailable, not
// ignored; a rate below the kernel's least quota is invalid.
func TestCPURateWithoutCgroups(t *testing.T) {
	s := newService(t, Config{noCgroups: true})
	_, err := s.Spawn(Request{Program: "/bin/true", CPURate: 500}, Caller{})
	if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "cgroups") {
		t.Fatalf("cpu-rate without cgroups: %v, want ErrUnavailable saying cgroups are needed", err)
	}
	if _, err := s.Spawn(Request{Program: "/bin/true", CPURate: MinCPURate - 1}, Caller{}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("cpu-rate below the least: %v, want ErrInvalid", err)
	}
	if n := len(s.List()); n != 0 {
		t.Fatalf("refused spawns left %d programs in list", n)
	}
}

// The files that detection reads, as the three kinds of machine write
// them: this one's (cgroup v1, an empty cgroup2 beside it), a pure
// cgroup v2 one, and a container shown only its own cgroup.
func TestParseCgroupFiles(t *testing.T) {
	mounts := parseCgMounts([]byte(`31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:39 /docker/abc /mnt/my\040cgroup rw - cgroup2 cgroup2 rw,nsdelegate
`))
	if len(mounts) != 4 {
		t.Fatalf("%d cgroup mounts, want 4: %+v", len(mounts), mounts)
	}
	if m := mounts[0]; m.v2 || m.point != "/sys/fs/cgroup/cpu,cpuacct" || !slices.Contains(m.opts, "cpu") || !slices.Contains(m.opts, "cpuacct") {
		t.Errorf("the cpu,cpuacct hierarchy: %+v", m)
	}
	if m := mounts[1]; m.v2 || !slices.Contains(m.opts, "memory") {
		t.Errorf("the memory hierarchy (with an optional field): %+v", m)
	}
	if m := mounts[3]; !m.v2 || m.root != "/docker/abc" || m.point != "/mnt/my cgroup" {
		t.Errorf("the cgroup2 mount with an escaped space: %+v", m)
	}

	own := parseOwnCgroups([]byte("9:name=systemd:/\n4:memory:/process_api/9b3f\n1:cpu,cpuacct:/\n0::/\n"))
	if own.v1["memory"] != "/process_api/9b3f" || own.v1["cpu"] != "/" || own.v1["cpuacct"] != "/" || !own.hasV2 || own.v2 != "/" {
		t.Errorf("this machine's /proc/self/cgroup: %+v", own)
	}
	if own := parseOwnCgroups([]byte("0::/user.slice/user-1000.slice/session-2.scope\n")); !own.hasV2 || own.v2 != "/user.slice/user-1000.slice/session-2.scope" || len(own.v1) != 0 {
		t.Errorf("a pure cgroup v2 machine's: %+v", own)
	}

	// The path of the process's cgroup under a mount of a cgroup above
	// it, and, where the mount shows only a cgroup of its own (a
	// container's), the mount's root.
	point := t.TempDir()
	if err := os.MkdirAll(filepath.Join(point, "sub", "leaf"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ root, path, want string }{
		{"/", "/sub/leaf", filepath.Join(point, "sub", "leaf")},
		{"/docker/abc", "/docker/abc/sub", filepath.Join(point, "sub")},
		{"/docker/abc", "/docker/abcd", point},
		{"/docker/abc", "/elsewhere", point},
		{"/", "/missing", point},
	} {
		if got := ownDir(cgMount{root: c.root, point: point}, c.path); got != c.want {
			t.Errorf("ownDir(root %s, path %s) = %s, want %s", c.root, c.path, got, c.want)
		}
	}
}

// BenchmarkSpawnLimits is the cost of limits on a spawn: /bin/true from
// the spawn to its reaping, with no limits (it starts directly), with
// mem= as an rlimit (behind the gate), and with mem= and cpu-rate= in a
// cgroup (behind the gate, and a cgroup made, entered and removed).
func BenchmarkSpawnLimits(b *testing.B) {
	for _, c := range []struct {
		name      string
		noCgroups bool
		r         Request
	}{
		{"none", false, Request{Program: "/bin/true"}},
		{"rlimit", true, Request{Program: "/bin/true", Mem: 256 << 20}},
		{"cgroup", false, Request{Program: "/bin/true", Mem: 256 << 20, CPURate: 500}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := New(Config{noCgroups: c.noCgroups, MaxKept: 1, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if c.name == "cgroup" && s.cg.version == 0 {
				b.Skipf("no cgroups: %s", s.cg.why)
			}
			ctx := context.Background()
			for b.Loop() {
				st, err := s.Spawn(c.r, Caller{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Wait(ctx, st.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

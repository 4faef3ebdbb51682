package spawn

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	spawnif "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/internal/testkit"
)

// --limit through the CLI and a real monitor: with cgroups (CI's
// machines offer cgroup v1 to root), a program over mem= is killed by
// the kernel's OOM killer and wait says so, cpu-rate= is applied, and the
// monitor's cgroups are gone once it has stopped; without them, mem= is
// an address-space rlimit and cpu-rate= is refused as unavailable.
func TestCLILimits(t *testing.T) {
	e := setup(t)
	cli := e.cli(t)
	for _, bad := range []string{"cpu-rate=0.001", "cpu-rate=x", "cpu-rate=-1", "rate=1"} {
		if out, err := cli("spawn", "--limit", bad, "--", "/bin/true"); err == nil || !strings.Contains(out, "--limit") {
			t.Errorf("--limit %s: %q, %v; want a usage error", bad, out, err)
		}
	}

	// tail keeps its one endless line (/dev/zero has no newline) in
	// memory: it grows until a limit stops it.
	// It fails, one way or the other: the command's status is the
	// program's (checked below).
	out, err := cli("spawn", "--limit", "mem=64M", "--wait", "--json", "--", "tail", "-n", "1", "/dev/zero")
	if exitStatus(err) <= 0 {
		t.Fatalf("spawn --limit mem=64M --wait: %v: %s; want the program's failure as the command's status", err, out)
	}
	var res struct {
		ID        uint64 `json:"id"`
		ExitCode  int    `json:"exit_code"`
		Signal    int    `json:"signal"`
		OOMKilled bool   `json:"oom_killed"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("spawn --json: %q: %v", out, err)
	}
	p := proc(t, e, res.ID)
	t.Logf("this machine: --limit mem= applied as %q", p.Limits)
	if p.Limits == "rlimit" {
		if os.Getenv("CI") != "" {
			t.Fatalf("the monitor found no cgroups: CI's machines offer cgroup v1 to root")
		}
		// Out of address space, tail says so and fails.
		if res.Signal != 0 || res.ExitCode == 0 {
			t.Fatalf("tail under an address-space limit: %+v, want a failure exit", res)
		}
		out, err := cli("spawn", "--limit", "cpu-rate=0.5", "--", "/bin/true")
		if err == nil || !strings.Contains(out, "unavailable") || !strings.Contains(out, "cgroups") {
			t.Fatalf("cpu-rate without cgroups: %q, %v; want unavailable, saying cgroups are needed", out, err)
		}
		t.Skip("this machine offers the monitor no cgroups: the rest is of cgroup limits (run as root, or with a delegated cgroup v2 subtree)")
	}
	if !strings.HasPrefix(p.Limits, "cgroup v") {
		t.Fatalf("limits %q, want cgroup v1 or v2 or rlimit", p.Limits)
	}
	if res.Signal != int(syscall.SIGKILL) || !res.OOMKilled || !p.OOMKilled {
		t.Fatalf("tail over mem=64M: %+v, list oom_killed %v; want SIGKILL by the OOM killer", res, p.OOMKilled)
	}
	if out, err := cli("wait", "--json", "0"); err == nil {
		t.Fatalf("wait 0: %q", out)
	}
	if out, err := cli("wait", itoa(res.ID)); exitStatus(err) != 128+9 || out != "signal killed (out of memory: over its memory limit)\n" {
		t.Fatalf("wait after the OOM kill: %q, %v", out, err)
	}

	// cpu-rate: the monitor's parent cgroup is there while it runs.
	out, err = cli("spawn", "--limit", "cpu-rate=0.5,mem=256M,cpu=10", "--wait", "--", "/bin/sh", "-c", "exit 3")
	if exitStatus(err) != 3 || !strings.HasSuffix(out, "exit status 3\n") {
		t.Fatalf("spawn --limit cpu-rate=0.5: %q, %v", out, err)
	}
	id := strings.Fields(out)[0]
	p = proc(t, e, atou(t, id))
	if p.CPURate != 0.5 || p.MemLimit != 256<<20 || p.CPULimit != 10 || !strings.HasSuffix(p.Limits, ", rlimit") {
		t.Fatalf("list: cpu_rate %v, mem_limit %d, cpu_limit %d, limits %q", p.CPURate, p.MemLimit, p.CPULimit, p.Limits)
	}
	parents := monitorCgroups(t, e.dir)
	if len(parents) == 0 {
		t.Fatal("no cgroup of the monitor's name in the cgroup hierarchies")
	}
	e.mon.Cmd.Process.Signal(syscall.SIGTERM)
	e.mon.Wait(t)
	for _, d := range parents {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("the monitor's cgroup %s is still there after it stopped", d)
		}
	}
}

// proc returns program id from the spawn service's list.
func proc(t *testing.T, e *env, id uint64) spawnif.Proc {
	t.Helper()
	procs, err := e.c.Procs(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("program %d is not in the list", id)
	return spawnif.Proc{}
}

// monitorCgroups finds the cgroups named as the monitor of dir names its
// own (chanos-<12 hex digits of the SHA-256 of its directory>), in every
// cgroup hierarchy mounted here.
func monitorCgroups(t *testing.T, dir string) []string {
	t.Helper()
	sum := sha256.Sum256([]byte(dir))
	name := "chanos-" + hex.EncodeToString(sum[:6])
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		i := len(fields) - 3
		if i < 5 || (fields[i] != "cgroup" && fields[i] != "cgroup2") {
			continue
		}
		filepath.WalkDir(fields[4], func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if d.Name() == name {
				found = append(found, path)
				return filepath.SkipDir
			}
			if strings.Count(path, "/")-strings.Count(fields[4], "/") > 6 {
				return filepath.SkipDir
			}
			return nil
		})
	}
	return found
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func atou(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

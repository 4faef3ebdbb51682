package testkit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The hostile-peer suite's table (docs/security.md): tests in several
// packages (tests/hostile, monitor) each add a row, an attack against a
// victim, with the victim's resident memory and descriptors before and
// after. `make test-hostile` collects the rows in the file named by
// CHANOS_HOSTILE_TABLE and prints it.

// Usage is what a victim process holds: its resident memory and its open
// descriptors.
type Usage struct {
	RSSKB, FDs int
}

func (u Usage) String() string {
	if u == (Usage{}) {
		return "-"
	}
	return fmt.Sprintf("%.1f MiB, %d fds", float64(u.RSSKB)/1024, u.FDs)
}

// Measure reads pid's resident memory and descriptor count from /proc.
func Measure(t testing.TB, pid int) Usage {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	var u Usage
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			u.RSSKB, _ = strconv.Atoi(f[1])
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	u.FDs = len(fds)
	return u
}

// HostileRow adds the test's row to the table when the test ends, with
// what before and after hold then: "held" if the test passed, "FAILED"
// if not; a skipped test adds none. Without CHANOS_HOSTILE_TABLE it does
// nothing.
func HostileRow(t testing.TB, attack, victim string, before, after *Usage) {
	file := os.Getenv("CHANOS_HOSTILE_TABLE")
	if file == "" {
		return
	}
	t.Cleanup(func() {
		if t.Skipped() {
			return
		}
		outcome := "held"
		if t.Failed() {
			outcome = "FAILED"
		}
		// One write in append mode: rows from test processes running at
		// once do not interleave.
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Errorf("the hostile-peer table: %v", err)
			return
		}
		defer f.Close()
		fmt.Fprintf(f, "| %s | %s | %s | %s | %s |\n", attack, victim, outcome, *before, *after)
	})
}

package bench

import (
	"os"
	"testing"
	"time"
)

// checkCPU checks that a case reports the CPU its sides used: some, as
// any measured work uses some.
func checkCPU(t *testing.T, r Result) {
	t.Helper()
	if r.CPUPercent == nil || *r.CPUPercent <= 0 {
		t.Errorf("%s/%s: no CPU figure (%v)", r.Suite, r.Key(), r.CPUPercent)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a parenthesis; utime 250, stime 50.
	line := []byte("1234 (a b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10 0")
	got, err := parseStatCPU(line)
	if err != nil || got != 3*time.Second {
		t.Errorf("parseStatCPU = %v, %v; want 3s", got, err)
	}
	if _, err := parseStatCPU([]byte("1234 (x) S 1 2")); err == nil {
		t.Error("parseStatCPU of a short line: no error")
	}
}

func TestParseMachineBusy(t *testing.T) {
	// user 100, nice 1, system 50, idle 900, iowait 7, irq 3, softirq 6,
	// steal 40: busy is 160 ticks.
	text := []byte("cpu  100 1 50 900 7 3 6 40 0 0\ncpu0 50 0 25 450 3 1 3 20 0 0\n")
	got, err := parseMachineBusy(text)
	if err != nil || got != 1600*time.Millisecond {
		t.Errorf("parseMachineBusy = %v, %v; want 1.6s", got, err)
	}
	if _, err := parseMachineBusy([]byte("intr 1 2 3\n")); err == nil {
		t.Error("parseMachineBusy without a cpu line: no error")
	}
	if b, err := machineBusy(); err != nil || b <= 0 {
		t.Errorf("machineBusy = %v, %v", b, err)
	}
}

// TestCPUMeter checks that the meter counts this process's work and the
// other process's, and gives no figure when a process cannot be read.
func TestCPUMeter(t *testing.T) {
	m := startCPU(0) // a side in this process is counted once
	if len(m.pids) != 0 {
		t.Errorf("pids %v: this process counted twice", m.pids)
	}
	t0 := nanotime()
	for c := cpuTime(); cpuTime() < c+time.Millisecond; {
	}
	if p := m.percent(nanotime() - t0); p == nil || *p <= 0 {
		t.Errorf("a busy loop: CPU %v", p)
	}
	self, err := processCPU(os.Getpid())
	if err != nil || self < 0 {
		t.Errorf("processCPU(self) = %v, %v", self, err)
	}
	m = startCPU(1 << 30) // no such process
	if p := m.percent(1e6); p != nil {
		t.Errorf("CPU of a process that is not there: %v", *p)
	}
	if p := cpuPercent(300*time.Millisecond, 2e8); *p != 150 {
		t.Errorf("cpuPercent(300ms over 200ms) = %v, want 150", *p)
	}
}

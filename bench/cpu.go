package bench

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"syscall"
	"time"
)

// The CPU that a case costs, both sides included: a ring that spins while
// it waits buys its round trip with CPU, and that cost is part of its
// result (Result.CPUPercent). chanos's cases are measured as chanos-peers
// measures its peers (bench/peers/cpu.go): over the measured phase, this
// process by getrusage plus each server process by /proc/PID/stat. Cases
// whose processes are all children of this one (the ump suite's peers)
// take the children's own rusage at exit instead (childrenCPU).

// clockTick is USER_HZ, the unit of the times in /proc/PID/stat; it is 100
// on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// processCPU returns the user plus system CPU time that process pid has
// used, all its threads, or this process's when pid is 0.
func processCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return cpuTime(), nil
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/PID/stat line. The command name, field 2, may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no command name")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), so field k is f[k-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name", len(f))
	}
	utime, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("proc stat: bad utime or stime")
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// cpuMeter measures the CPU that this process and the processes pids use
// from startCPU to percent.
type cpuMeter struct {
	pids  []int
	start time.Duration
	ok    bool
}

// startCPU starts measuring this process and pids (0s are left out: a
// side in this process is counted once, with it).
func startCPU(pids ...int) *cpuMeter {
	m := &cpuMeter{ok: true}
	for _, p := range pids {
		if p != 0 {
			m.pids = append(m.pids, p)
		}
	}
	m.start = m.sample()
	return m
}

func (m *cpuMeter) sample() time.Duration {
	total := cpuTime()
	for _, p := range m.pids {
		t, err := processCPU(p)
		if err != nil {
			m.ok = false
		}
		total += t
	}
	return total
}

// percent returns the CPU used since startCPU over wallNS of wall time,
// in percent of one core (200 is two cores busy), or nil if a process
// could not be read.
func (m *cpuMeter) percent(wallNS int64) *float64 {
	used := m.sample() - m.start
	if !m.ok || wallNS <= 0 {
		return nil
	}
	return cpuPercent(used, wallNS)
}

// cpuPercent is used over wallNS in percent of one core, to a tenth.
func cpuPercent(used time.Duration, wallNS int64) *float64 {
	return f64(math.Round(1000*float64(used)/float64(wallNS)) / 10)
}

// childrenCPU returns the CPU time that exited children used in their
// whole lives, from the rusage that wait returned for each.
func childrenCPU(states ...*os.ProcessState) time.Duration {
	var total time.Duration
	for _, s := range states {
		if s != nil {
			total += s.UserTime() + s.SystemTime()
		}
	}
	return total
}

// cpuTime returns the CPU time this process has used, all threads.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineBusy returns the CPU time every CPU of the machine has spent
// busy since boot, from /proc/stat's first line: user, nice, system, irq
// and softirq (guests count in user). The kernel's own work for a
// process, its network stack's softirqs among it, lands here whichever
// task it interrupted, where a process's rusage may miss it. Idle, I/O
// wait and steal (another guest of the host running) are not busy. The
// counters move in USER_HZ ticks (10 ms), so a measure wants many of
// them.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineBusy(b)
}

// parseMachineBusy is machineBusy's reading of /proc/stat's text.
func parseMachineBusy(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 8 || string(f[0]) != "cpu" {
		return 0, fmt.Errorf("/proc/stat: no cpu line")
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		n, err := strconv.ParseInt(string(f[i]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: field %d: %w", i, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// busyMeter adds up the machine's busy CPU time over the spans between
// start and stop.
type busyMeter struct {
	busy time.Duration
	at   time.Duration
	err  error
}

func (m *busyMeter) start() { m.at = m.read() }

// stop ends the span, adding it if keep is set (a warm-up's is not).
func (m *busyMeter) stop(keep bool) {
	if b := m.read(); keep {
		m.busy += b - m.at
	}
}

// read returns machineBusy, keeping its first error.
func (m *busyMeter) read() time.Duration {
	b, err := machineBusy()
	if err != nil && m.err == nil {
		m.err = err
	}
	return b
}

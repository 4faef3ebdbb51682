package peers

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of the times in /proc/PID/stat; it is 100
// on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// cpuTime returns the user plus system CPU time that process pid has used,
// or this process's when pid is 0.
func cpuTime(pid int) (time.Duration, error) {
	if pid == 0 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0, err
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
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

// cpuMeter measures the CPU used by this process and one server process.
type cpuMeter struct {
	pid        int
	self, peer time.Duration
	ok         bool
}

func startCPU(pid int) *cpuMeter {
	m := &cpuMeter{pid: pid, ok: true}
	m.self, m.peer = m.sample()
	return m
}

func (m *cpuMeter) sample() (self, peer time.Duration) {
	self, err := cpuTime(0)
	if err != nil {
		m.ok = false
	}
	if m.pid != 0 {
		peer, err = cpuTime(m.pid)
		if err != nil {
			m.ok = false
		}
	}
	return self, peer
}

// percent returns the CPU used since startCPU by both processes, as a
// percentage of wall; 100 is one core busy.
func (m *cpuMeter) percent(wall time.Duration) float64 {
	self, peer := m.sample()
	if !m.ok || wall <= 0 {
		return 0
	}
	used := (self - m.self) + (peer - m.peer)
	return round1(100 * float64(used) / float64(wall))
}

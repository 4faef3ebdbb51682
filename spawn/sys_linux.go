package spawn

// The system calls the service needs that package syscall does not wrap,
// made directly so that the monitor links no third-party package.

import (
	"syscall"
	"unsafe"
)

// CPUSet is a CPU affinity mask of up to 1024 CPUs, as the kernel's
// cpu_set_t.
type CPUSet [16]uint64

// Set adds cpu to the set.
func (s *CPUSet) Set(cpu int) { s[cpu/64] |= 1 << (uint(cpu) % 64) }

// IsSet reports whether cpu is in the set.
func (s *CPUSet) IsSet(cpu int) bool { return s[cpu/64]&(1<<(uint(cpu)%64)) != 0 }

// Count returns the number of CPUs in the set.
func (s *CPUSet) Count() int {
	n := 0
	for c := range len(s) * 64 {
		if s.IsSet(c) {
			n++
		}
	}
	return n
}

// schedAffinity gets (set false) or sets the affinity of the calling
// thread (tid 0).
func schedAffinity(set bool, s *CPUSet) error {
	nr := uintptr(syscall.SYS_SCHED_GETAFFINITY)
	if set {
		nr = syscall.SYS_SCHED_SETAFFINITY
	}
	_, _, e := syscall.RawSyscall(nr, 0, unsafe.Sizeof(*s), uintptr(unsafe.Pointer(s)))
	if e != 0 {
		return e
	}
	return nil
}

// prlimit sets resource's limit of process pid.
func prlimit(pid, resource int, lim *syscall.Rlimit) error {
	_, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(resource),
		uintptr(unsafe.Pointer(lim)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// waitExited waits until process pid, a child, has ended, without reaping
// it (WNOWAIT): it stays a zombie, and its pid its own, until it is
// waited for.
func waitExited(pid int) error {
	const pPID = 1 // P_PID
	// A siginfo_t, 128 bytes, which the kernel fills and nobody reads.
	var info [16]uint64
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info)),
			syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch e {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		}
		return e
	}
}

// openForWriting reports whether any process holds the file path open for
// writing: the kernel refuses a read lease on such a file (EAGAIN), and
// grants it otherwise (the lease goes at once, with the descriptor). The
// caller must own the file. An error means the kernel cannot tell (leases
// turned off, or a filesystem without them).
func openForWriting(path string) (bool, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer syscall.Close(fd)
	_, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETLEASE, syscall.F_RDLCK)
	switch e {
	case 0:
		syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETLEASE, syscall.F_UNLCK)
		return false, nil
	case syscall.EAGAIN:
		return true, nil
	}
	return false, e
}

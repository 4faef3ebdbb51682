package spawn

// The three system calls the service needs that package syscall does not
// wrap, made directly so that the monitor links no third-party package.

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

package spawn

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"syscall"
)

// shipSource is the bytes of a file that Ship sends, read twice at once:
// by the goroutine that hashes them and by the one that sends them in
// chunks. Where the file can be mapped (a regular file, not empty), both
// read the mapping: the hash reads the file's pages in place and a chunk
// is one copy out of them, where reading the file costs a system call and
// a copy for each, which on a machine whose CPUs the transfer keeps busy
// shows in the ship's time. Otherwise both read the file at their own
// offsets.
type shipSource struct {
	f    *os.File
	size int64
	m    []byte // the file's first size bytes, mapped; nil if not mapped
}

// openShipSource returns the first size bytes of f as a shipSource,
// mapped if f can be.
func openShipSource(f *os.File, size int64) *shipSource {
	s := &shipSource{f: f, size: size}
	if size <= 0 || int64(int(size)) != size {
		return s
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return s
	}
	rc.Control(func(fd uintptr) {
		m, err := syscall.Mmap(int(fd), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return // not a file that maps (a pipe, a device, /proc): read it
		}
		// Read once from start to end, by both readers.
		syscall.Madvise(m, syscall.MADV_SEQUENTIAL)
		s.m = m
	})
	return s
}

// close unmaps the file. Neither reader may run any longer.
func (s *shipSource) close() {
	if s.m != nil {
		syscall.Munmap(s.m)
		s.m = nil
	}
}

// errFileShrank is what a read of the mapping reports when the file has
// been cut shorter since it was mapped: its pages past the new end are
// gone, and touching them faults (SIGBUS).
var errFileShrank = errors.New("the file shrank while it was read")

// hashPiece is how much of the mapping the hash takes between two looks
// at whether the ship has ended.
const hashPiece = 1 << 20

// hash returns the SHA-256 of the bytes in hex, or errShipEnded once stop
// is closed.
func (s *shipSource) hash(stop <-chan struct{}) (string, error) {
	h := sha256.New()
	if s.m == nil {
		n, err := io.Copy(h, &stoppable{r: io.NewSectionReader(s.f, 0, s.size), stop: stop})
		switch {
		case err != nil:
			return "", fmt.Errorf("read: %w", err)
		case n != s.size:
			return "", fmt.Errorf("read %d bytes of %d: the file changed", n, s.size)
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	err := readMapped(func() error {
		for off := 0; off < len(s.m); off += hashPiece {
			select {
			case <-stop:
				return errShipEnded
			default:
			}
			h.Write(s.m[off:min(off+hashPiece, len(s.m))])
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readAt fills b with the bytes at off, which with b lie within the
// first size bytes.
func (s *shipSource) readAt(b []byte, off int64) error {
	if s.m == nil {
		_, err := s.f.ReadAt(b, off)
		if err == io.EOF {
			return fmt.Errorf("%w: the file changed", io.ErrUnexpectedEOF)
		}
		return err
	}
	return readMapped(func() error {
		copy(b, s.m[off:])
		return nil
	})
}

// stoppable reads r until stop is closed.
type stoppable struct {
	r    io.Reader
	stop <-chan struct{}
}

func (s *stoppable) Read(b []byte) (int, error) {
	select {
	case <-s.stop:
		return 0, errShipEnded
	default:
	}
	return s.r.Read(b)
}

var errShipEnded = errors.New("the ship has ended")

// readMapped runs read, which reads a mapping of a file, and turns a
// fault in it (the file cut shorter by another process meanwhile) into
// errFileShrank rather than the end of the process. read must hold no
// lock and leave nothing half done when it faults: only the hash's own
// state and copies into the caller's buffers qualify.
func readMapped(read func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			err = errFileShrank
		}
	}()
	return read()
}

// Package device is the keyboard of seed 002's driver experiment
// (docs/benchmarks.md, "The driver experiment"), simulated by a process:
// it raises interrupts by signalling an Event and exposes its registers in
// a page of shared memory (a memfd). Experiment runs the device, a driver
// (examples/driver/gokbd, or examples/c/kbd_driver.c) and the driver's
// client, each in a process of its own, and measures the time from each
// interrupt to the client's receipt of the key event it completes.
//
// The registers, little-endian:
//
//	0x00 uint32 head:   scancode bytes produced so far (the device's)
//	0x04 uint32 status: bit 0 set once the device is removed
//	0x08 uint32 tail:   scancode bytes consumed so far (the driver's)
//	0x40 FIFO: 64 entries of 16 bytes, entry n%64 holding byte n:
//	     uint64 stamp (CLOCK_MONOTONIC, ns, at the interrupt), uint8 scancode
//
// The device writes an entry, then head, then signals the interrupt. The
// driver reads the entries from tail to head and then writes tail. While
// the FIFO is full the device holds its next byte back, as a keyboard
// does while the host inhibits it: no byte is lost, however late the
// driver runs, and a byte's stamp is the time it was raised.
package device

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/chanos/chanos/chanos"
)

// The register layout.
const (
	RegHead    = 0x00
	RegStatus  = 0x04
	RegTail    = 0x08
	RegFIFO    = 0x40
	FIFOLen    = 64
	EntrySize  = 16
	RegsSize   = 4096
	StatusGone = 1
)

// Script is what the device types, in scancode set 2: "Hello, L4!",
// Enter and the Up arrow (an extended key), each key pressed and released.
var Script = []byte{
	0x12, 0x33, 0xF0, 0x33, 0xF0, 0x12, // H (with Left Shift)
	0x24, 0xF0, 0x24, 0x4B, 0xF0, 0x4B, 0x4B, 0xF0, 0x4B, 0x44, 0xF0, 0x44, // e l l o
	0x41, 0xF0, 0x41, 0x29, 0xF0, 0x29, // , Space
	0x12, 0x4B, 0xF0, 0x4B, 0xF0, 0x12, // L
	0x25, 0xF0, 0x25, // 4
	0x12, 0x16, 0xF0, 0x16, 0xF0, 0x12, // !
	0x5A, 0xF0, 0x5A, // Enter
	0xE0, 0x75, 0xE0, 0xF0, 0x75, // Up
}

// Key is a key event: a Linux input key code and press or release.
type Key struct {
	Code    uint16
	Pressed bool
}

// ScriptKeys is what a driver decodes from Script, in order.
var ScriptKeys = []Key{
	{42, true}, {35, true}, {35, false}, {42, false},
	{18, true}, {18, false}, {38, true}, {38, false}, {38, true}, {38, false}, {24, true}, {24, false},
	{51, true}, {51, false}, {57, true}, {57, false},
	{42, true}, {38, true}, {38, false}, {42, false},
	{5, true}, {5, false},
	{42, true}, {2, true}, {2, false}, {42, false},
	{28, true}, {28, false},
	{103, true}, {103, false},
}

// Monotonic returns CLOCK_MONOTONIC in nanoseconds: the clock of the
// device's stamps, which C reads with clock_gettime.
func Monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Run types script repeat times on the registers regs, a page of shared
// memory, raising the interrupt irq after each byte, one byte every
// period (0: as fast as it can), and then removes the device.
func Run(regs []byte, irq *chanos.Event, script []byte, repeat int, period time.Duration) error {
	if len(regs) < RegsSize {
		return errors.New("device: the register page is too small")
	}
	head := (*uint32)(unsafe.Pointer(&regs[RegHead]))
	status := (*uint32)(unsafe.Pointer(&regs[RegStatus]))
	tail := (*uint32)(unsafe.Pointer(&regs[RegTail]))
	next := Monotonic()
	for range repeat {
		for _, b := range script {
			if period > 0 {
				next += int64(period)
				// Asleep, not spinning, so that the device leaves the CPU
				// to the driver: the stamp is taken when the interrupt is
				// raised, whenever the sleep ends.
				if d := next - Monotonic(); d > 0 {
					time.Sleep(time.Duration(d))
				}
			}
			h := atomic.LoadUint32(head)
			for h-atomic.LoadUint32(tail) >= FIFOLen {
				time.Sleep(10 * time.Microsecond)
			}
			e := regs[RegFIFO+EntrySize*(h%FIFOLen):][:EntrySize]
			binary.LittleEndian.PutUint64(e, uint64(Monotonic()))
			e[8] = b
			atomic.StoreUint32(head, h+1)
			if err := irq.Signal(); err != nil {
				return fmt.Errorf("device: interrupt: %w", err)
			}
		}
	}
	atomic.StoreUint32(status, StatusGone)
	return irq.Signal()
}

// Main runs the device in a process of its own: descriptor 3 is the
// register page, 4 the interrupt; args are the repeat count and the period.
func Main(args []string) error {
	if len(args) != 2 {
		return errors.New("device: want REPEAT PERIOD")
	}
	repeat, err := strconv.Atoi(args[0])
	if err != nil {
		return fmt.Errorf("device: repeat: %w", err)
	}
	period, err := time.ParseDuration(args[1])
	if err != nil {
		return fmt.Errorf("device: period: %w", err)
	}
	f := os.NewFile(3, "regs")
	regs, err := syscall.Mmap(int(f.Fd()), 0, RegsSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	f.Close()
	if err != nil {
		return fmt.Errorf("device: map the registers: %w", err)
	}
	defer syscall.Munmap(regs)
	irq, err := chanos.EventFromCap(os.NewFile(4, "irq"))
	if err != nil {
		return fmt.Errorf("device: interrupt: %w", err)
	}
	defer irq.Close()
	return Run(regs, irq, Script, repeat, period)
}

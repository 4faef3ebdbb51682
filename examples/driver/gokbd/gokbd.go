// Package gokbd is the Go keyboard driver of seed 002's driver experiment
// (docs/benchmarks.md, "The driver experiment"): it waits on its device's
// interrupt, an Event, reads the scancodes from the device's registers,
// a page of shared memory, decodes scancode set 2 and sends each key event
// to its client over a keyboard connection. examples/c/kbd_driver.c is the
// same driver in C.
package gokbd

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/examples/driver/keyboard"
)

// The device's registers (examples/driver/device).
const (
	regHead    = 0x00 // uint32: scancode bytes produced so far
	regStatus  = 0x04 // uint32: bit 0 set once the device is removed
	regTail    = 0x08 // uint32: scancode bytes consumed so far (ours)
	regFIFO    = 0x40 // 64 entries of 16 bytes: uint64 stamp, uint8 scancode
	fifoLen    = 64
	entrySize  = 16
	regsSize   = 4096
	statusGone = 1
)

// device is the device the client attaches: the driver's server of
// keyboard until then.
type device struct {
	keyboard.UnimplementedServer
	regs []byte
	irq  *chanos.Event
	spin bool
}

// Attach maps the registers and takes the interrupt; its reply tells the
// client that the driver waits for interrupts.
func (d *device) Attach(ctx context.Context, regs *os.File, irq *chanos.Event, spin bool) error {
	defer regs.Close()
	m, err := syscall.Mmap(int(regs.Fd()), 0, regsSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		irq.Close()
		return fmt.Errorf("driver: map the registers: %w", err)
	}
	d.regs, d.irq, d.spin = m, irq, spin
	return nil
}

// Run drives the device that the client attaches over c, until the device
// is removed or ctx ends, and closes c.
func Run(ctx context.Context, c *keyboard.Conn) error {
	defer c.Close()
	var d device
	for d.regs == nil {
		if err := c.Handle(ctx, &d); err != nil {
			return fmt.Errorf("driver: waiting for the device: %w", err)
		}
	}
	defer syscall.Munmap(d.regs)
	defer d.irq.Close()
	regs := d.regs
	head := (*uint32)(unsafe.Pointer(&regs[regHead]))
	status := (*uint32)(unsafe.Pointer(&regs[regStatus]))
	tailReg := (*uint32)(unsafe.Pointer(&regs[regTail]))
	var dec Decoder
	var tail uint32
	for {
		if err := waitIRQ(ctx, d.irq, d.spin); err != nil {
			return fmt.Errorf("driver: interrupt: %w", err)
		}
		// The status before the head: once the device is removed, the
		// head read after it is its last.
		gone := atomic.LoadUint32(status)&statusGone != 0
		h := atomic.LoadUint32(head)
		for ; tail != h; tail++ {
			e := regs[regFIFO+entrySize*(tail%fifoLen):][:entrySize]
			code, pressed, ok := dec.Feed(e[8])
			if !ok {
				continue
			}
			k := &keyboard.Key{Code: code, Pressed: pressed, Stamp: binary.LittleEndian.Uint64(e)}
			if err := c.Send(ctx, k); err != nil {
				return fmt.Errorf("driver: send: %w", err)
			}
		}
		atomic.StoreUint32(tailReg, tail) // room in the FIFO again
		if gone {
			return c.Send(ctx, &keyboard.Gone{})
		}
	}
}

// waitIRQ waits for the next interrupt: parked in the netpoller, or
// polling the Event.
func waitIRQ(ctx context.Context, irq *chanos.Event, spin bool) error {
	if !spin {
		_, err := irq.Wait(ctx)
		return err
	}
	for {
		if _, ok, err := irq.TryWait(); ok || err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Main runs the driver in a process of its own: descriptor 3 is the
// endpoint of its keyboard connection, made by its client.
func Main(ctx context.Context) error {
	raw, err := chanos.OpenEndpoint(os.NewFile(3, "keyboard-endpoint"), keyboard.Interface)
	if err != nil {
		return fmt.Errorf("driver: %w", err)
	}
	return Run(ctx, keyboard.NewConn(raw))
}

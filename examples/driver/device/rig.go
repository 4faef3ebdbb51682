package device

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/examples/driver/keyboard"
)

// Experiment is one run of the driver experiment: this process is the
// client; the driver and the device run in processes of their own.
type Experiment struct {
	// Driver runs a driver: descriptor 3 is its keyboard endpoint.
	Driver []string
	// Device runs Main: descriptors 3 and 4 are the registers and the
	// interrupt; the repeat count and the period are appended.
	Device []string
	// Spin has the driver poll its interrupt rather than sleep on it.
	Spin bool
	// Repeat is how many times the device types Script.
	Repeat int
	// Period is the time between interrupts (0: as fast as the device
	// can).
	Period time.Duration
}

// Event is a key event the client received, and its latency: from the
// interrupt that completed it to its receipt.
type Event struct {
	Key
	Latency time.Duration
}

// Run runs the experiment and returns the key events in the order
// received.
func (x Experiment) Run(ctx context.Context) ([]Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	fd, err := unix.MemfdCreate("kbd-regs", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("registers: %w", os.NewSyscallError("memfd_create", err))
	}
	regs := os.NewFile(uintptr(fd), "kbd-regs")
	defer regs.Close()
	if err := regs.Truncate(RegsSize); err != nil {
		return nil, fmt.Errorf("registers: %w", err)
	}
	irq, err := chanos.NewEvent()
	if err != nil {
		return nil, err
	}
	defer irq.Close()
	raw, ep, err := chanos.NewEndpoint(keyboard.Interface)
	if err != nil {
		return nil, err
	}
	c := keyboard.NewConn(raw)
	defer c.Close()
	epFile, err := capFile(ep)
	ep.Close() // the driver's copy must be the only one
	if err != nil {
		return nil, err
	}
	driver := exec.CommandContext(ctx, x.Driver[0], x.Driver[1:]...)
	driver.ExtraFiles, driver.Stderr = []*os.File{epFile}, os.Stderr
	err = driver.Start()
	epFile.Close()
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	defer stop(driver)

	irqCap, err := irq.Copy()
	if err != nil {
		return nil, err
	}
	regsCap, err := dupFile(regs)
	if err != nil {
		irqCap.Close()
		return nil, err
	}
	if err := c.Attach(ctx, regsCap, irqCap, x.Spin); err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	irqFile, err := capFile(irq)
	if err != nil {
		return nil, err
	}
	args := append(x.Device[1:len(x.Device):len(x.Device)], strconv.Itoa(x.Repeat), x.Period.String())
	device := exec.CommandContext(ctx, x.Device[0], args...)
	device.ExtraFiles, device.Stderr = []*os.File{regs, irqFile}, os.Stderr
	err = device.Start()
	irqFile.Close()
	if err != nil {
		return nil, fmt.Errorf("device: %w", err)
	}
	defer stop(device)

	events := make([]Event, 0, x.Repeat*len(ScriptKeys))
	for {
		m, err := c.Receive(ctx)
		if err != nil {
			return events, fmt.Errorf("driver ended before the device was removed: %w", err)
		}
		switch m := m.(type) {
		case *keyboard.Key:
			lat := time.Duration(Monotonic() - int64(m.Stamp))
			events = append(events, Event{Key{m.Code, m.Pressed}, lat})
		case *keyboard.Gone:
			if err := device.Wait(); err != nil {
				return events, fmt.Errorf("device: %w", err)
			}
			if err := driver.Wait(); err != nil {
				return events, fmt.Errorf("driver: %w", err)
			}
			return events, nil
		default:
			return events, fmt.Errorf("driver sent %s", m.MsgName())
		}
	}
}

// stop kills p if it still runs and waits for it.
func stop(p *exec.Cmd) {
	if p.ProcessState == nil {
		p.Process.Kill()
		p.Wait()
	}
}

// capFile returns a duplicate of the descriptor of c (an Endpoint, an
// Event), for a child's ExtraFiles.
func capFile(c interface {
	SyscallConn() (syscall.RawConn, error)
}) (*os.File, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, os.NewSyscallError("dup", derr)
	}
	return os.NewFile(uintptr(nfd), "cap"), nil
}

// dupFile returns a duplicate of f, to give away.
func dupFile(f *os.File) (*os.File, error) { return capFile(f) }

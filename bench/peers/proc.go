package peers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ServeCommand is the hidden first argument with which the driver
// re-executes its own binary as a peer's server process.
const ServeCommand = "__peer-server"

// readyTimeout bounds how long a server process may take to listen.
const readyTimeout = 20 * time.Second

// procServer is a peer server running in a child process. The child
// reports "ready ADDR" on its stdout once it listens, and exits when its
// stdin reaches end of file, so it never outlives the driver for long.
type procServer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
	dir   string // removed on Close, if set

	done    chan struct{} // closed when the child has exited
	waitErr error

	closeOnce sync.Once
	closeErr  error
}

// startProc starts env.Exe as the server of transport, listening at addr
// (its meaning is the transport's) for n clients. extra become the child's
// file descriptors 3, 4, ...; startProc closes them in this process.
func startProc(ctx context.Context, env Env, transport, addr string, n int, extra []*os.File, dir string) (*procServer, error) {
	closeExtra := func() {
		for _, f := range extra {
			f.Close()
		}
	}
	if env.Exe == "" {
		closeExtra()
		return nil, errors.New("no server executable")
	}
	cmd := exec.Command(env.Exe, ServeCommand, transport, addr, strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = extra
	// A binary built with -race sleeps a second when it exits, unless
	// told not to; other binaries ignore GORACE.
	cmd.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	// The child also dies if this process does; stdin's end of file is
	// the orderly way.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		closeExtra()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		closeExtra()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		closeExtra()
		return nil, fmt.Errorf("start %s server: %w", transport, err)
	}
	closeExtra()
	p := &procServer{cmd: cmd, stdin: stdin, dir: dir, done: make(chan struct{})}

	lines := make(chan string, 1)
	go func() {
		// Read the ready line, then drain stdout until the child exits.
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		lines <- line
		io.Copy(io.Discard, br)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()

	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case line := <-lines:
		a, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
		if !ok {
			p.Close()
			return nil, fmt.Errorf("%s server did not start (said %q)", transport, line)
		}
		p.addr = a
		return p, nil
	case <-timer.C:
		p.Close()
		return nil, fmt.Errorf("%s server not ready after %v", transport, readyTimeout)
	case <-ctx.Done():
		p.Close()
		return nil, ctx.Err()
	}
}

func (p *procServer) PID() int { return p.cmd.Process.Pid }

// Close ends the child: end of file on its stdin, then SIGKILL if it has
// not exited within two seconds. It reports a child that failed.
func (p *procServer) Close() error {
	p.closeOnce.Do(func() {
		p.stdin.Close()
		select {
		case <-p.done:
			if p.waitErr != nil {
				p.closeErr = fmt.Errorf("server process: %w", p.waitErr)
			}
		case <-time.After(2 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if p.dir != "" {
			os.RemoveAll(p.dir)
		}
	})
	return p.closeErr
}

// kill ends the child at once; the watchdog uses it on a hung measurement.
func (p *procServer) kill() {
	p.cmd.Process.Kill()
}

// A serveFunc is the server side of a transport: it listens at addr for n
// clients and returns the address clients should dial, and a function that
// serves until the process exits.
type serveFunc func(addr string, n int) (string, func() error, error)

func serveFuncs() map[string]serveFunc {
	return map[string]serveFunc{
		"uds":        serveUDS,
		"tcp":        serveTCP,
		"pipe":       servePipe,
		"grpc-uds":   serveGRPC,
		"grpc-tcp":   serveGRPCTCP,
		"shmipc-go":  serveShmipc,
		"netrpc-uds": serveNetRPC,
	}
}

// ServeMain is the server process: args are what follows ServeCommand
// (transport, address, number of clients). It returns the exit status.
func ServeMain(args []string) int {
	// Stdout carries the ready line only: keep it for that, and send
	// anything a library prints on stdout to stderr instead.
	ready, err := reserveStdout()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chanos-peers server:", err)
		return 1
	}
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "chanos-peers server: want TRANSPORT ADDR CLIENTS")
		return 2
	}
	serve, ok := serveFuncs()[args[0]]
	n, err := strconv.Atoi(args[2])
	if !ok || err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "chanos-peers server: bad arguments %q\n", args)
		return 2
	}
	addr, run, err := serve(args[1], n)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chanos-peers server %s: %v\n", args[0], err)
		return 1
	}
	exit := make(chan int, 1)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		exit <- 0
	}()
	go func() {
		if err := run(); err != nil {
			fmt.Fprintf(os.Stderr, "chanos-peers server %s: %v\n", args[0], err)
			exit <- 1
		}
	}()
	fmt.Fprintf(ready, "ready %s\n", addr)
	ready.Close()
	return <-exit
}

// reserveStdout returns a new file for what is now stdout, and points file
// descriptor 1 at stderr, so that libraries that print to os.Stdout (as
// shmipc-go's logger does) cannot corrupt machine-readable output.
func reserveStdout() (*os.File, error) {
	fd, err := syscall.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("dup stdout: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Dup3(2, 1, 0); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("redirect stdout: %w", err)
	}
	return os.NewFile(uintptr(fd), "stdout"), nil
}

// ReserveStdout is reserveStdout for the driver's main: it returns the
// writer for results and sends everything else printed on stdout to
// stderr.
func ReserveStdout() (*os.File, error) { return reserveStdout() }

// serverError reports whether err is worth printing when a server
// connection ends: not the ordinary ends of a connection.
func serverError(err error) bool {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) {
		return false
	}
	return !strings.Contains(err.Error(), "use of closed network connection")
}

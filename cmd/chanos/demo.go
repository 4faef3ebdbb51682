package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/internal/rundir"
)

const demoUsage = `usage: chanos demo [-n N]
       chanos demo --machines N

Starts a monitor (in a private directory unless CHANOS_DIR is set), the
pingpong example server and client as separate processes, shows what they
print, runs chanos names and a chanos call of the server's echo, and stops
everything. The examples must be
beside this executable (make builds them into bin/).

  -n N   round trips of each kind the client makes (default 20000)
`

// runDemo starts a monitor, the pingpong example server and client as
// separate processes, shows what they print, and shuts everything down.
func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	n := fs.Int("n", 20000, "round trips of each kind the client makes")
	machines := fs.Int("machines", 0, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("demo", "unexpected argument %q", fs.Arg(0))
	}
	if *machines != 0 {
		return runClusterDemo(ctx, *machines)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	bin := filepath.Dir(self)
	server, client := filepath.Join(bin, "pingpong-server"), filepath.Join(bin, "pingpong-client")
	for _, p := range []string{server, client} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("demo: %s is missing: build the examples with `make` (they go beside chanos in %s)", filepath.Base(p), bin)
		}
	}

	// A private monitor directory, unless the user chose one.
	dir := os.Getenv(rundir.EnvVar)
	if dir == "" {
		if dir, err = os.MkdirTemp("", "chanos-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	fmt.Printf("demo: monitor directory %s\n", dir)
	env := append(os.Environ(), rundir.EnvVar+"="+dir)

	var out sync.Mutex // keeps the processes' lines whole
	start := func(prefix, path string, args ...string) (*exec.Cmd, error) {
		cmd := exec.Command(path, args...)
		cmd.Env = env
		pipe(cmd, prefix, &out)
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("demo: start %s: %w", filepath.Base(path), err)
		}
		fmt.Printf("demo: started %s (pid %d)\n", prefix, cmd.Process.Pid)
		return cmd, nil
	}
	stop := func(cmd *exec.Cmd, what string) error {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("demo: %s exited: %w", what, err)
			}
			return nil
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("demo: %s did not stop within 5s of SIGTERM", what)
		}
	}

	mon, err := start("monitor", self, "monitor", "--dir", dir)
	if err != nil {
		return err
	}
	monStopped := false
	defer func() {
		if !monStopped {
			stop(mon, "monitor")
		}
	}()
	if err := waitForMonitor(ctx, dir); err != nil {
		return err
	}
	srv, err := start("server", server, "-name", "demo.pingpong")
	if err != nil {
		return err
	}
	cli, err := start("client", client, "-name", "demo.pingpong", "-n", strconv.Itoa(*n))
	if err != nil {
		stop(srv, "server")
		return err
	}
	cliErr := cli.Wait()
	names := exec.Command(self, "names", "--dir", dir)
	pipe(names, "chanos names", &out)
	namesErr := names.Run()
	// The same service from the shell, from its IDL alone.
	call := exec.Command(self, "call", "--dir", dir, "demo.pingpong", "echo", `{"val": 7}`)
	pipe(call, "chanos call demo.pingpong echo {\"val\": 7}", &out)
	callErr := call.Run()
	errs := []error{}
	if cliErr != nil {
		errs = append(errs, fmt.Errorf("demo: client failed: %w", cliErr))
	}
	if namesErr != nil {
		errs = append(errs, fmt.Errorf("demo: chanos names failed: %w", namesErr))
	}
	if callErr != nil {
		errs = append(errs, fmt.Errorf("demo: chanos call failed: %w", callErr))
	}
	errs = append(errs, stop(srv, "server"))
	monStopped = true
	errs = append(errs, stop(mon, "monitor"))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Println("demo: everything stopped cleanly")
	return nil
}

// pipe sends cmd's output, line by line, to our stdout behind a prefix.
// exec copies through the writer and Wait waits for the copy to finish.
func pipe(cmd *exec.Cmd, prefix string, mu *sync.Mutex) {
	w := &prefixWriter{prefix: prefix, mu: mu}
	cmd.Stdout, cmd.Stderr = w, w
}

type prefixWriter struct {
	prefix string
	mu     *sync.Mutex
	buf    []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		fmt.Printf("  [%s] %s\n", w.prefix, w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

// waitForMonitor waits until the monitor in dir accepts connections.
func waitForMonitor(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		c, err := seqpacket.Dial(ctx, rundir.Socket(dir), 64)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: the monitor did not start listening in %s: %w", dir, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

package testkit

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A test binary plays roles in child processes: a server killed with -9,
// the other end of a ring, a benchmark's peer. It starts itself (Self,
// Command) with a role's name and arguments; TestMain calls Main, which
// runs the role instead of the tests.

// roleFlag, first on a child's command line, names its role.
const roleFlag = "-testkit.role"

// Roles are the roles a test binary can play, by name. A role gets the
// arguments it was started with; its process exits with status 0 if it
// returns nil, else with status 1 and the error on stderr.
type Roles map[string]func(args []string) error

// Main is a test binary's TestMain: it runs the role this process was
// started in, or the tests.
func Main(m *testing.M, roles Roles) {
	os.Exit(Run(m, roles))
}

// Run is Main for a TestMain with work of its own after the tests: it
// returns the tests' exit code rather than exit (a role still exits).
func Run(m *testing.M, roles Roles) int {
	if !InRole() {
		return m.Run()
	}
	name := os.Args[2]
	role, ok := roles[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "no role %q in this test binary\n", name)
		os.Exit(2)
	}
	if err := role(os.Args[3:]); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
	return 0
}

// InRole reports whether this process was started in a role (by Self or
// Command), for a TestMain that does more than Main around the tests.
func InRole() bool { return len(os.Args) >= 3 && os.Args[1] == roleFlag }

// Command returns the command line that runs this test binary in role
// with args; more arguments may be appended. It is for code that starts
// the processes itself.
func Command(role string, args ...string) []string {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	return append([]string{self, roleFlag, role}, args...)
}

// Self returns a command that runs this test binary in role with args,
// for Start.
func Self(role string, args ...string) *exec.Cmd {
	argv := Command(role, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	// The race detector otherwise waits a second at exit.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	return cmd
}

// Child is a process started by Start, its output read line by line.
type Child struct {
	Cmd  *exec.Cmd
	name string

	mu    sync.Mutex
	lines []string      // printed and not yet taken
	eof   bool          // the output has ended
	more  chan struct{} // receives a token when lines or eof change
	done  chan struct{} // closed once the process ended; err is then set
	err   error         // what Wait returned
}

// Start starts cmd (see Self), with its stderr going to the test's own
// unless cmd sets it. At the test's end a child still running is killed,
// after SIGQUIT (its stacks) if the test failed.
func Start(t testing.TB, cmd *exec.Cmd) *Child {
	t.Helper()
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{Cmd: cmd, name: filepath.Base(cmd.Path), more: make(chan struct{}, 1), done: make(chan struct{})}
	if len(cmd.Args) >= 3 && cmd.Args[1] == roleFlag {
		c.name = cmd.Args[2]
	}
	go func() {
		// Read to the end, whether or not the test reads the lines: a
		// child must never block on a full pipe.
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
			c.notify()
		}
		c.mu.Lock()
		c.eof = true
		c.mu.Unlock()
		c.notify()
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			if t.Failed() {
				// Where a child the failed test left running was.
				c.askStacks()
			}
		}
		c.Kill()
	})
	return c
}

func (c *Child) notify() {
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// Line returns the next line the child prints, and fails the test if its
// output ends first or nothing comes within Limit.
func (c *Child) Line(t testing.TB) string {
	t.Helper()
	timer := time.NewTimer(Limit)
	defer timer.Stop()
	for {
		c.mu.Lock()
		if len(c.lines) > 0 {
			l := c.lines[0]
			c.lines = c.lines[1:]
			c.mu.Unlock()
			return l
		}
		eof := c.eof
		c.mu.Unlock()
		if eof {
			<-c.done
			t.Fatalf("%s ended (%v) without printing another line", c.name, c.err)
		}
		select {
		case <-c.more:
		case <-timer.C:
			c.askStacks()
			t.Fatalf("%s printed nothing within %v (sent SIGQUIT: a Go child's stacks are in its stderr)", c.name, Limit)
		}
	}
}

// Expect fails the test unless the next line the child prints is want.
func (c *Child) Expect(t testing.TB, want string) {
	t.Helper()
	if l := c.Line(t); l != want {
		t.Fatalf("%s printed %q, want %q", c.name, l, want)
	}
}

// Wait waits for the child to end and returns what exec.Cmd.Wait
// returned; it fails the test if the child has not ended within Limit,
// after asking it for its goroutines' stacks (SIGQUIT) and killing it.
func (c *Child) Wait(t testing.TB) error {
	t.Helper()
	timer := time.NewTimer(Limit)
	defer timer.Stop()
	select {
	case <-c.done:
		return c.err
	case <-timer.C:
		c.askStacks()
		c.Kill()
		t.Fatalf("%s did not end within %v (sent SIGQUIT: a Go child's stacks are in its stderr); lines it printed that the test did not read: %q", c.name, Limit, c.Remaining())
		return nil
	}
}

// askStacks sends the child SIGQUIT and gives it 2 s to end: a Go child
// writes every goroutine's stack to its stderr and ends, which shows
// where it hangs in the test's log.
func (c *Child) askStacks() {
	c.Cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.done:
	case <-time.After(2 * time.Second):
	}
}

// Done is closed once the child has ended and its output has been read
// to the end.
func (c *Child) Done() <-chan struct{} { return c.done }

// Remaining returns the lines the child printed that Line has not
// returned; after Wait, all the rest of its output.
func (c *Child) Remaining() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lines
	c.lines = nil
	return l
}

// Kill kills the child with SIGKILL, if it still runs, and waits for its
// end.
func (c *Child) Kill() {
	c.Cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

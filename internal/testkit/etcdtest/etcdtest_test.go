package etcdtest

import (
	"errors"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// TestClusterLifecycle: three members, one started through a command
// prefix, are healthy; a killed member restarts on its data and rejoins;
// and when the test that started them ends, every process is gone.
func TestClusterLifecycle(t *testing.T) {
	Need(t) // here: a subtest's skip would leave this test without pids
	var pids []int
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, Options{Members: 3, Prefixes: [][]string{nil, {"env", "ETCDTEST_PREFIXED=1"}, nil}})
		if n := len(c.Endpoints()); n != 3 {
			t.Fatalf("%d endpoints", n)
		}
		client := &http.Client{Timeout: time.Second}
		for i := range 3 {
			if !healthy(client, c.Endpoint(i)) {
				t.Fatalf("member %d not healthy", i)
			}
		}
		c.Kill(1)
		if healthy(client, c.Endpoint(1)) {
			t.Fatal("a killed member answers")
		}
		c.Restart(1)
		c.WaitHealthy()
		for _, m := range c.members {
			m.mu.Lock()
			pids = append(pids, m.cmd.Process.Pid)
			m.mu.Unlock()
		}
	})
	if len(pids) != 3 {
		t.Fatalf("pids %v", pids)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("member process %d still exists after its test: %v", pid, err)
		}
	}
}

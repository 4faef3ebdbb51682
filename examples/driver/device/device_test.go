package device_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chanos/chanos/bench"
	"github.com/chanos/chanos/examples/driver/device"
	"github.com/chanos/chanos/examples/driver/gokbd"
)

// The test binary runs the device and the Go driver in processes of their
// own, under this variable.
const roleEnv = "CHANOS_KBD_ROLE"

func TestMain(m *testing.M) {
	var err error
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "device":
		err = device.Main(os.Args[1:])
	case "driver":
		err = gokbd.Main(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// self returns a command that runs this test binary in role.
func self(t *testing.T, role string) []string {
	t.Setenv(roleEnv, "")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"/usr/bin/env", roleEnv + "=" + role, exe}
}

func cDriver(t *testing.T) []string {
	p, err := bench.FindCProgram(filepath.Join("examples", "kbd_driver"))
	if err != nil {
		t.Fatalf("the C driver: %v", err)
	}
	return []string{p}
}

// TestDrivers runs the Go and the C driver end to end, parked and
// spinning: the client must receive every key of the device's script, in
// order, decoded.
func TestDrivers(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/env"); err != nil {
		t.Skip("no /usr/bin/env")
	}
	for _, lang := range []string{"go", "c"} {
		for _, spin := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/spin=%v", lang, spin), func(t *testing.T) {
				drv := self(t, "driver")
				if lang == "c" {
					drv = cDriver(t)
				}
				const repeat = 3
				x := device.Experiment{Driver: drv, Device: self(t, "device"), Spin: spin, Repeat: repeat, Period: 200 * time.Microsecond}
				events, err := x.Run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				var want []device.Key
				for range repeat {
					want = append(want, device.ScriptKeys...)
				}
				if len(events) != len(want) {
					t.Fatalf("got %d key events, want %d", len(events), len(want))
				}
				for i, e := range events {
					if e.Key != want[i] {
						t.Errorf("key event %d: got %+v, want %+v", i, e.Key, want[i])
					}
					if e.Latency <= 0 {
						t.Errorf("key event %d: latency %v: the stamp is not the device's clock", i, e.Latency)
					}
				}
			})
		}
	}
}

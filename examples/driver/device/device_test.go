package device_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chanos/chanos/bench"
	"github.com/chanos/chanos/examples/driver/device"
	"github.com/chanos/chanos/examples/driver/gokbd"
	"github.com/chanos/chanos/internal/testkit"
)

// The test binary plays the device and the Go driver in processes of
// their own.
func TestMain(m *testing.M) {
	testkit.Main(m, testkit.Roles{
		"device": device.Main,
		"driver": func([]string) error { return gokbd.Main(context.Background()) },
	})
}

func cDriver(t *testing.T) []string {
	p, err := bench.FindCProgram(filepath.Join("examples", "kbd_driver"))
	if err != nil {
		t.Fatalf("the C driver: %v", err)
	}
	return []string{p}
}

// TestDrivers runs the Go and the C driver end to end, parked and
// spinning, with the device at 5,000 interrupts a second and as fast as
// it can (20 times the script: its FIFO fills, and it must hold bytes
// back): the client must receive every key of the script, in order,
// decoded.
func TestDrivers(t *testing.T) {
	for _, lang := range []string{"go", "c"} {
		for _, spin := range []bool{false, true} {
			for _, rate := range []struct {
				name   string
				period time.Duration
				repeat int
			}{{"5000/s", 200 * time.Microsecond, 3}, {"flat-out", 0, 20}} {
				t.Run(fmt.Sprintf("%s/spin=%v/%s", lang, spin, rate.name), func(t *testing.T) {
					drv := testkit.Command("driver")
					if lang == "c" {
						drv = cDriver(t)
					}
					x := device.Experiment{Driver: drv, Device: testkit.Command("device"), Spin: spin, Repeat: rate.repeat, Period: rate.period}
					events, err := x.Run(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					checkKeys(t, events, rate.repeat)
				})
			}
		}
	}
}

// checkKeys checks that events are the script's keys, repeat times.
func checkKeys(t *testing.T, events []device.Event, repeat int) {
	t.Helper()
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
}

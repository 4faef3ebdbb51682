package spawn_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/chanos/chanos/chanos"
	spawnif "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/monitor"
	"github.com/chanos/chanos/spawn"
)

// A domain asks its machine's spawn service to run a program, waits for
// its end and reads its output. DialMachine reaches another machine's
// service the same way, and Ship sends it a program it lacks.
func Example() {
	ctx := context.Background()

	// A private monitor that may spawn what /bin and /usr/bin hold, as
	// `chanos monitor --dir DIR --spawn-allow /bin --spawn-allow /usr/bin`.
	dir, _ := os.MkdirTemp("", "chanos-example-")
	defer os.RemoveAll(dir)
	m, err := monitor.New(monitor.Config{
		Dir:    dir,
		Logger: slog.New(slog.DiscardHandler),
		Spawn:  spawn.Config{Allow: []string{"/bin", "/usr/bin"}, Logger: slog.New(slog.DiscardHandler)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	go m.Serve(mctx)

	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	c, err := spawnif.Dial(ctx, d)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	st, err := c.Start(ctx, spawnif.Request{Program: "echo", Args: []string{"hello from a spawned program"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	exit, err := c.WaitExit(ctx, st.ID)
	fmt.Println(exit, err)
	out, _, done, err := c.Output(ctx, st.ID, 0, true)
	fmt.Printf("%q %v %v\n", out, done, err)

	// Outside the allowed directories (this program itself), the service
	// refuses.
	self, _ := os.Executable()
	_, err = c.Start(ctx, spawnif.Request{Program: self})
	fmt.Println(spawnif.Code(err) == spawnif.CodeDenied)
	// Output:
	// exit status 0 <nil>
	// "hello from a spawned program\n" true <nil>
	// true
}

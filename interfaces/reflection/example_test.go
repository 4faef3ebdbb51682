package reflection_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/kv"
	"github.com/chanos/chanos/interfaces/reflection"
	"github.com/chanos/chanos/monitor"
)

// A domain exports kv and the reflection service beside it; a tool that
// has no kv.if asks for kv's interface.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "chanos-example-")
	defer os.RemoveAll(dir)
	m, err := monitor.New(monitor.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
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

	svc, err := kv.Export(ctx, d, "kv")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Close()
	l, err := reflection.Export(ctx, d, reflection.NameOf("kv"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go reflection.Serve(ctx, l, reflection.NewExports(d))

	tool, err := reflection.Connect(ctx, d, reflection.NameOf("kv"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tool.Close()
	iface, fp, def, err := tool.Describe(ctx, "kv")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(iface, fp == kv.Fingerprint, strings.Contains(def, "rpc get("))
	// Output: kv true true
}

package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	spawnif "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/internal/testkit"
)

// shipper is a domain that uses the cache of shipped programs of another
// machine's spawn service through the Go client. args: the monitor's
// directory, the target machine's id (hex), then one of
//
//	spawn HASH ARG...  spawn the cached file HASH; print "exit: N" and
//	                   "output: TEXT", or "refused: ERR"
//	garbage HASH SIZE  upload SIZE bytes of garbage under HASH; print the
//	                   outcome ("refused: ERR"), then "cached: BOOL"
//	halfway HASH SIZE  begin an upload of SIZE bytes under HASH, send
//	                   half, print "half", and hold until killed
func shipper(args []string) error {
	dir, target, mode, hash := args[0], args[1], args[2], args[3]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("ship-test"))
	if err != nil {
		return err
	}
	defer d.Close()
	id, err := strconv.ParseUint(target, 16, 64)
	if err != nil {
		return err
	}
	c, err := spawnif.DialMachine(ctx, d, id)
	if err != nil {
		return err
	}
	defer c.Close()
	switch mode {
	case "spawn":
		st, err := c.Start(ctx, spawnif.Request{Hash: hash, Program: "shipped-echo", Args: args[4:]})
		if err != nil {
			fmt.Printf("refused: %v\n", err)
			return nil
		}
		e, err := c.WaitExit(ctx, st.ID)
		if err != nil {
			return err
		}
		var out []byte
		for from, done := uint64(0), false; !done; {
			var b []byte
			var start uint64
			if b, start, done, err = c.Output(ctx, st.ID, from, true); err != nil {
				return err
			}
			out, from = append(out, b...), start+uint64(len(b))
		}
		procs, err := c.Procs(ctx)
		if err != nil {
			return err
		}
		for _, p := range procs {
			if p.ID == st.ID {
				fmt.Printf("program: %s\n", p.Program)
			}
		}
		fmt.Printf("exit: %d\noutput: %s", e.Code, out)
	case "garbage":
		size, _ := strconv.ParseInt(args[4], 10, 64)
		_, err := c.Upload(ctx, hash, size, bytes.NewReader(bytes.Repeat([]byte{'x'}, int(size))))
		fmt.Printf("refused: %v\n", err)
		present, _, _, err := c.Cached(ctx, hash)
		if err != nil {
			return err
		}
		fmt.Printf("cached: %v\n", present)
	case "halfway":
		size, _ := strconv.ParseInt(args[4], 10, 64)
		// A reader that gives half the bytes, then blocks: Upload sends
		// the first half and waits for the rest.
		half := io.MultiReader(bytes.NewReader(make([]byte, size/2)), blockReader{})
		go c.Upload(ctx, hash, size, half)
		time.Sleep(500 * time.Millisecond)
		fmt.Println("half")
		<-ctx.Done()
	default:
		return fmt.Errorf("shipper: unknown mode %q", mode)
	}
	return nil
}

// paddedEcho writes a copy of /bin/echo named name into dir, padded so
// that shipping it takes several chunks (the kernel loads an ELF file by
// its headers and ignores what follows), and returns its path.
func paddedEcho(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile("/bin/echo")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, make([]byte, 300<<10)...)
	prog := filepath.Join(dir, name)
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return prog
}

// blockReader blocks forever.
type blockReader struct{}

func (blockReader) Read([]byte) (int, error) { select {} }

// TestSpawnShip: from machine 2, 'chanos spawn --ship' runs on machine 1
// a program that exists only in a directory of the caller's, which the
// test then deletes: a later spawn by hash runs the copy in machine 1's
// cache. A second --ship sends nothing. Garbage under the program's hash
// is refused and leaves the cache without it; an upload abandoned
// halfway spoils no other and is dropped when its domain dies; a cached
// file changed on the target is refused before it runs.
func TestSpawnShip(t *testing.T) {
	w := newWorld(t, 2, 1)
	for i := range 2 {
		w.admit(i, w.root)
	}
	w.start(0)
	w.start(1)
	id1 := w.machineID(0)
	w.awaitLink(1, 0)
	cacheDir := filepath.Join(w.dirs[0], "spawn-cache")

	// The program: a copy of echo in a directory of the caller's.
	src := t.TempDir()
	prog := paddedEcho(t, src, "shipme")
	hash, size, err := spawnif.HashFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	sizeArg := strconv.FormatInt(size, 10)

	// An upload of the same file abandoned halfway, held open meanwhile.
	argv := testkit.Command("shipper", w.dirs[1], id1, "halfway", hash, sizeArg)
	half := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	half.Expect(t, "half")

	// Garbage under the program's hash.
	argv = testkit.Command("shipper", w.dirs[1], id1, "garbage", hash, sizeArg)
	g := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := g.Line(t); !strings.Contains(l, "spawn: invalid argument") || !strings.Contains(l, "SHA-256") {
		t.Fatalf("garbage upload: %q, want refused as invalid, naming the SHA-256", l)
	}
	if l := g.Line(t); l != "cached: false" {
		t.Fatalf("after the garbage upload: %q, want cached: false", l)
	}
	g.Wait(t)

	// The CLI ships it and runs it; a second time, it sends nothing.
	type shipped struct {
		spawned
		SHA256   string `json:"sha256"`
		Uploaded bool   `json:"uploaded"`
	}
	s := decode[shipped](t, w.chanosIn(1, "spawn", "--ship", "--on", "mach1", "--wait", "--json", "--", prog, "hello", "from", "the", "cache"))
	if !s.Uploaded || s.SHA256 != hash || s.Machine != id1 || s.ExitCode != 0 {
		t.Fatalf("spawn --ship: %+v; want uploaded, sha256 %s, machine %s, exit 0", s, hash, id1)
	}
	if out := w.chanosIn(1, "logs", "-f", "--on", "mach1", strconv.FormatUint(s.ID, 10)); out != "hello from the cache\n" {
		t.Fatalf("logs: %q", out)
	}
	s = decode[shipped](t, w.chanosIn(1, "spawn", "--ship", "--on", "mach1", "--wait", "--json", "--", prog, "again"))
	if s.Uploaded || s.ExitCode != 0 {
		t.Fatalf("second spawn --ship: %+v; want not uploaded, exit 0", s)
	}

	// The caller's copy goes; machine 1 runs its own.
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	if out, err := w.chanosTry(1, "spawn", "--ship", "--on", "mach1", "--", prog); err == nil || !strings.Contains(out, "no such file") {
		t.Fatalf("spawn --ship of a file that is gone: %v: %s", err, out)
	}
	argv = testkit.Command("shipper", w.dirs[1], id1, "spawn", hash, "still", "here")
	sp := testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := sp.Line(t); l != "program: "+filepath.Join(cacheDir, hash) {
		t.Fatalf("spawn by hash: %q, want the program in machine 1's cache", l)
	}
	if l := sp.Line(t); l != "exit: 0" {
		t.Fatalf("spawn by hash: %q", l)
	}
	if l := sp.Line(t); l != "output: still here" {
		t.Fatalf("spawn by hash: %q", l)
	}
	sp.Wait(t)

	// The abandoned upload: still there until its domain dies, then gone.
	if m, _ := filepath.Glob(filepath.Join(cacheDir, ".up-*")); len(m) != 1 {
		t.Fatalf("upload files in machine 1's cache: %v; want the abandoned one's", m)
	}
	half.Kill()
	testkit.Eventually(t, "the abandoned upload's file removed", func() bool {
		m, _ := filepath.Glob(filepath.Join(cacheDir, ".up-*"))
		return len(m) == 0
	})

	// A cached file changed on machine 1 is refused before it runs.
	f := filepath.Join(cacheDir, hash)
	if err := os.Chmod(f, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("#!/bin/sh\necho tampered\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	argv = testkit.Command("shipper", w.dirs[1], id1, "spawn", hash)
	sp = testkit.Start(t, w.net.Machines[1].Command(argv[0], argv[1:]...))
	if l := sp.Line(t); !strings.Contains(l, "refused: ") || !strings.Contains(l, "has changed") {
		t.Fatalf("spawn of a tampered cached file: %q, want refused, changed", l)
	}
	sp.Wait(t)
	if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the tampered file: %v, want removed", err)
	}
}

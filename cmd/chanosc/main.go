// Command chanosc compiles chanos IDL interface files (Flounder-compatible)
// into Go or C.
//
// Usage:
//
//	chanosc [-i FILE]... -lang go|c -o OUTDIR FILE.if
//	chanosc --version
//
// For Go, OUTDIR is the package directory and the package is named after
// the interface; for C, OUTDIR receives NAME.h and NAME.c. Errors are
// printed one per line as FILE:LINE:COL: message, and the exit status is 1.
// In a module of your own, add it as a tool (go get -tool
// github.com/chanos/chanos/cmd/chanosc) and run it from go:generate:
//
//	//go:generate go tool chanosc -lang go -o . ping.if
//
// See docs/idl.md for the language.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/chanos/chanos/gen"
	cgen "github.com/chanos/chanos/gen/c"
	"github.com/chanos/chanos/gen/golang"
	"github.com/chanos/chanos/idl"
	"github.com/chanos/chanos/internal/buildinfo"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return fmt.Sprint(*l) }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the exit, so tests can call it. The deferred recover
// turns a bug in chanosc into one line rather than a stack trace: the user
// gets a message to report, not a wall of runtime output.
func run(args []string, stdout, stderr io.Writer) (status int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "chanosc: internal error: %v (please report this with the input file)\n", r)
			status = 3
		}
	}()
	fs := flag.NewFlagSet("chanosc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var includes listFlag
	fs.Var(&includes, "i", "include `FILE` of type declarations (repeatable)")
	lang := fs.String("lang", "", "target language: go or c")
	out := fs.String("o", "", "output `DIR` (for Go, the package directory)")
	noNameCheck := fs.Bool("no-name-check", false, "allow an interface name that differs from the file's base name")
	messagesOnly := fs.Bool("messages-only", false, "Go: generate messages and codecs only, without client, server and connection plumbing")
	showVersion := fs.Bool("version", false, "print the version of chanosc and of Go, and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: chanosc [-i FILE]... -lang go|c -o OUTDIR FILE.if\n       chanosc --version\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		if fs.NArg() > 0 {
			return usage(fs, "--version takes no arguments, not %q", fs.Args())
		}
		fmt.Fprintln(stdout, buildinfo.Line("chanosc"))
		return 0
	}
	switch {
	case fs.NArg() == 0:
		return usage(fs, "give the FILE.if to compile")
	case fs.NArg() > 1:
		// The flag package stops at the first argument that is not a
		// flag, so flags written after the file land here too.
		return usage(fs, "give one FILE.if, after the flags; not %q", fs.Args())
	case *out == "":
		return usage(fs, "give the output directory: -o OUTDIR")
	}
	var backend gen.Backend
	switch *lang {
	case "go":
		backend = &golang.Backend{MessagesOnly: *messagesOnly}
	case "c":
		backend = cgen.New()
	default:
		fmt.Fprintf(stderr, "chanosc: -lang must be go or c, not %q\n", *lang)
		return 2
	}
	iface, err := idl.Load(fs.Arg(0), includes, idl.Options{AllowNameMismatch: *noNameCheck})
	if err != nil {
		fmt.Fprintln(stderr, describe(err))
		return 1
	}
	files, err := backend.Generate(iface)
	if err != nil {
		fmt.Fprintln(stderr, describe(err))
		return 1
	}
	if err := writeFiles(*out, files); err != nil {
		fmt.Fprintf(stderr, "chanosc: %v\n", err)
		return 1
	}
	return 0
}

// usage says what is wrong with the command line, then how it goes, on
// fs's output, and returns the status of a command-line mistake.
func usage(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(fs.Output(), "chanosc: "+format+"\n", args...)
	fs.Usage()
	return 2
}

// describe formats errors: positioned errors stand alone (FILE:LINE:COL:
// message), others get the program's name.
func describe(err error) string {
	var list idl.ErrorList
	var one *idl.Error
	if errors.As(err, &list) || errors.As(err, &one) {
		return err.Error()
	}
	return "chanosc: " + err.Error()
}

// writeFiles writes each file into dir, leaving files whose content is
// unchanged untouched so that build tools see no spurious change. Each file
// is written to a temporary name and renamed, so a reader never sees half
// a file.
func writeFiles(dir string, files []gen.File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.Data) {
			continue
		}
		tmp, err := os.CreateTemp(dir, "."+f.Name+".tmp*")
		if err != nil {
			return err
		}
		_, werr := tmp.Write(f.Data)
		cerr := tmp.Close()
		if werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = os.Chmod(tmp.Name(), 0o644)
		}
		if werr == nil {
			werr = os.Rename(tmp.Name(), path)
		}
		if werr != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("writing %s: %w", path, werr)
		}
	}
	return nil
}

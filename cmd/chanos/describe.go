package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/idl"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/reflection"
)

const describeUsage = `usage: chanos describe [--json] [--timeout D] [--dir DIR] NAME

Asks the reflection service of the domain that exports NAME (the name
NAME.reflection: docs/reflection.md) for NAME's interface, and prints it
as an interface file of its own, which chanosc compiles to the same
interface (and fingerprint) as the server's.

  --json       one JSON document on one line: {"name", "iface",
               "fingerprint", "definition"}; a failure prints
               {"error": MESSAGE, "code": CODE} instead
  --timeout D  how long to wait for NAME.reflection to exist and for the
               answer (a Go duration; default 10s)
`

// runDescribe runs 'chanos describe'.
func runDescribe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("describe", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	asJSON := fs.Bool("json", false, "")
	timeout := fs.Duration("timeout", 10*time.Second, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("describe", "give NAME")
	}
	if *timeout <= 0 {
		return usagef("describe", "--timeout must be positive")
	}
	name := fs.Arg(0)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	d, err := dialMonitor(ctx, *dir, "chanos describe", chanos.WithCallTimeout(*timeout))
	if err != nil {
		return err
	}
	defer d.Close()
	desc, err := describeExport(ctx, d, name)
	if err != nil {
		return fmt.Errorf("describe: %w", err)
	}
	if *asJSON {
		return writeJSON(os.Stdout, struct {
			Name        string `json:"name"`
			Iface       string `json:"iface"`
			Fingerprint string `json:"fingerprint"`
			Definition  string `json:"definition"`
		}{name, desc.iface.Name, fmt.Sprintf("%016x", desc.iface.Fingerprint()), desc.definition})
	}
	_, err = fmt.Print(desc.definition)
	return err
}

// described is an export's interface as its domain's reflection service
// gave it.
type described struct {
	iface      *idl.Interface
	definition string
}

// describeExport asks the reflection service beside name for name's
// interface and compiles it. A definition that does not compile, or that
// compiles to another name or fingerprint than the service gave, is the
// server's fault and said so; one that lies consistently gains nothing, as
// the monitor binds a client only to an export of the same fingerprint.
func describeExport(ctx context.Context, d *chanos.Domain, name string) (*described, error) {
	if err := reflectionExists(ctx, d, name); err != nil {
		return nil, err
	}
	c, err := reflection.Connect(ctx, d, reflection.NameOf(name))
	if err != nil {
		return nil, fmt.Errorf("the reflection service of %q: %w", name, err)
	}
	defer c.Close()
	ifname, fp, def, err := c.Describe(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", reflection.NameOf(name), err)
	}
	iface, err := idl.Compile(idl.Source{Name: reflection.NameOf(name), Data: []byte(def)}, nil, idl.Options{AllowNameMismatch: true})
	if err != nil {
		return nil, fmt.Errorf("the definition %s gave does not compile: %w", reflection.NameOf(name), err)
	}
	if iface.Name != ifname || iface.Fingerprint() != fp {
		return nil, fmt.Errorf("%s described %s (fingerprint %016x) with a definition of %s (fingerprint %016x)", reflection.NameOf(name), ifname, fp, iface.Name, iface.Fingerprint())
	}
	return &described{iface: iface, definition: def}, nil
}

// errNoReflection is a service whose domain serves no reflection beside it.
var errNoReflection = errors.New("no reflection service")

// reflectionExists fails at once when name is registered and
// name.reflection is not, rather than waiting for the latter until the
// timeout: the domain serves none. When neither is, both may be on their
// way, and Connect waits.
func reflectionExists(ctx context.Context, d *chanos.Domain, name string) error {
	ns, err := nameservice.Connect(ctx, d, nameservice.ServiceName)
	if err != nil {
		return fmt.Errorf("the nameservice: %w", err)
	}
	defer ns.Close()
	if _, errval, err := ns.Get(ctx, reflection.NameOf(name)); err != nil || errval == 0 {
		return err
	}
	if _, errval, err := ns.Get(ctx, name); err != nil || errval != 0 {
		return err
	}
	return fmt.Errorf("%w: %q is exported but %q is not (its domain must serve reflection: docs/reflection.md); give the interface file instead", errNoReflection, name, reflection.NameOf(name))
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/monitor"
)

const psUsage = `usage: chanos ps [--json] [--dir DIR]

Lists the domains connected to this user's monitor, with their exports and
connections. --json prints the monitor's ps document
(docs/monitor-protocol.md gives its schema).
`

// cliTimeout bounds the calls of the inspection commands.
const cliTimeout = 10 * time.Second

// runPs runs 'chanos ps'.
func runPs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ps", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", "", "")
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Print(psUsage)
			return nil
		}
		return fmt.Errorf("%w: ps: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: ps: unexpected argument %q", errUsage, fs.Arg(0))
	}
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	c, err := dialMonitor(ctx, *dir, "chanos ps")
	if err != nil {
		return err
	}
	defer c.Close()
	snap, err := c.Ps(ctx)
	if err != nil {
		return fmt.Errorf("ps: %w", err)
	}
	if *asJSON {
		b, err := json.Marshal(snap)
		if err != nil {
			return fmt.Errorf("ps: %w", err)
		}
		_, err = fmt.Printf("%s\n", b)
		return err
	}
	return printPs(os.Stdout, snap, c.ID())
}

// dialMonitor joins the monitor of the directory given by flagDir (see
// monitor.Dir) as program.
func dialMonitor(ctx context.Context, flagDir, program string) (*chanos.Domain, error) {
	dir, err := monitor.Dir(flagDir)
	if err != nil {
		return nil, err
	}
	return chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram(program))
}

// printPs prints snap as a table, leaving out the domain self (the
// session of this command).
func printPs(w io.Writer, snap *chanos.Snapshot, self uint64) error {
	mi := snap.Monitor
	fmt.Fprintf(w, "monitor %s  pid %d  socket %s  domains %d of %d\n\n",
		mi.MachineID, mi.PID, mi.Socket, mi.Limits.Domains-1, mi.Limits.MaxDomains)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tPID\tPROGRAM\tEXPORTS\tCONNECTIONS")
	for _, d := range snap.Domains {
		if d.ID == self {
			continue
		}
		var exports, conns []string
		for _, e := range d.Exports {
			desc := e.Iface
			if e.Private {
				desc += ", private"
			}
			if len(e.AllowUIDs) > 0 || len(e.AllowPrograms) > 0 {
				desc += ", allow-list"
			}
			exports = append(exports, fmt.Sprintf("%s (%s)", e.Name, desc))
		}
		for _, c := range d.Connections {
			arrow := "->"
			if c.Role == "server" {
				arrow = "<-"
			}
			conns = append(conns, fmt.Sprintf("#%d %s%d %s/%s", c.ConnID, arrow, c.Peer, c.Name, c.Via))
		}
		program := orDash(printable(d.Program))
		if d.Unresponsive {
			program += " (unresponsive)"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\n", d.ID, d.PID, program, orDash(strings.Join(exports, ", ")), orDash(strings.Join(conns, ", ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if snap.Truncated {
		fmt.Fprintln(w, "(more domains than fit in one ps reply: the list is cut short)")
	}
	return nil
}

// printable replaces the bytes of s that a terminal would interpret (a
// domain chooses its program name freely) with '?'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

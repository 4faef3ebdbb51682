package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/monitor"
)

const psUsage = `usage: chanos ps [--all | --cluster] [--json] [--dir DIR]

Lists the domains connected to this user's monitor, with their exports and
connections: the monitor itself (domain 1) first, then every session by id,
this command's own included (shown as "(this command)"). The first line
counts the open sessions against the monitor's cap (--max-domains): these
are limits.domains and limits.max_domains of the JSON document, and count
this command's session too, but not the monitor.

--json prints the monitor's ps document as it comes, on one line
(docs/monitor-protocol.md gives its schema); a failure prints
{"error": MESSAGE, "code": CODE} instead (code no_monitor when no monitor
runs), and the exit status is not 0.

--all adds the programs the spawn services of the cluster's machines
started (docs/spawn.md); with --json the document is then {"ps": PS,
"spawned": [...]}.

--cluster lists every machine of the cluster, this one first, each as its
monitor answers (at most 256 KiB of another machine's document); with
--json: {"cluster": NAME, "machines": [{"id", "name", "ps": PS} or
{"id", "name", "error": MESSAGE}]}.
`

// cliTimeout bounds the calls of the inspection commands.
const cliTimeout = 10 * time.Second

// runPs runs 'chanos ps'.
func runPs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ps", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	asJSON := fs.Bool("json", false, "")
	all := fs.Bool("all", false, "")
	cluster := fs.Bool("cluster", false, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("ps", "unexpected argument %q", fs.Arg(0))
	}
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	c, err := dialMonitor(ctx, *dir, "chanos ps")
	if err != nil {
		return err
	}
	defer c.Close()
	if *cluster {
		return psCluster(ctx, c, *asJSON)
	}
	snap, err := c.Ps(ctx)
	if err != nil {
		return err
	}
	if *all {
		return psAll(ctx, c, snap, *asJSON)
	}
	if *asJSON {
		return writeJSON(os.Stdout, snap)
	}
	return printPs(os.Stdout, snap, c.ID())
}

// dialMonitor joins the monitor of the directory given by flagDir (see
// monitor.Dir) as program, with opts.
func dialMonitor(ctx context.Context, flagDir, program string, opts ...chanos.Option) (*chanos.Domain, error) {
	dir, err := monitor.Dir(flagDir)
	if err != nil {
		return nil, err
	}
	return chanos.Join(ctx, append([]chanos.Option{chanos.WithDir(dir), chanos.WithProgram(program)}, opts...)...)
}

// printPs prints snap as a table, every domain of it, self (the session
// of this command) marked as such. Its numbers are the document's, so
// that the table and --json agree.
func printPs(w io.Writer, snap *chanos.Snapshot, self uint64) error {
	mi := snap.Monitor
	// The monitor's own domain (its services, such as spawnd) is listed
	// but has no session: a reader counting rows would be one off.
	fmt.Fprintf(w, "monitor %s  pid %d  socket %s  sessions %d of %d (every domain but the monitor's own)\n\n",
		mi.MachineID, mi.PID, mi.Socket, mi.Limits.Domains, mi.Limits.MaxDomains)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tPID\tPROGRAM\tEXPORTS\tCONNECTIONS")
	for _, d := range snap.Domains {
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
			peer, via := strconv.FormatUint(c.Peer, 10), c.Via
			if c.Machine != "" {
				peer += "@" + c.Machine
			}
			if c.AuthOnly {
				via += " (authenticated only)"
			}
			conns = append(conns, fmt.Sprintf("#%d %s%s %s/%s", c.ConnID, arrow, peer, c.Name, via))
		}
		program := orDash(printable(d.Program))
		if d.Unresponsive {
			program += " (unresponsive)"
		}
		if d.ID == self {
			program += " (this command)"
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

// psCluster prints the ps of every machine of the cluster, this one's
// first, each as its monitor answers it; a machine that does not answer
// is named with the error. --json prints {"cluster", "machines": [{"id",
// "name", "ps"} or {"id", "name", "error"}]}.
func psCluster(ctx context.Context, d *chanos.Domain, asJSON bool) error {
	list, err := d.Machines(ctx)
	if err != nil {
		return err
	}
	slices.SortStableFunc(list.Machines, func(a, b chanos.MachineInfo) int {
		switch {
		case a.Self == b.Self:
			return 0
		case a.Self:
			return -1
		}
		return 1
	})
	type entry struct {
		ID    string           `json:"id"`
		Name  string           `json:"name"`
		Ps    *chanos.Snapshot `json:"ps,omitempty"`
		Error string           `json:"error,omitempty"`
	}
	out := struct {
		Cluster  string  `json:"cluster"`
		Machines []entry `json:"machines"`
	}{Cluster: list.Cluster, Machines: []entry{}}
	for i, m := range list.Machines {
		id, _ := strconv.ParseUint(m.ID, 16, 64)
		if m.Self {
			id = 0
		}
		snap, err := d.PsOf(ctx, id)
		e := entry{ID: m.ID, Name: m.Name, Ps: snap}
		if err != nil {
			e.Error = err.Error()
		}
		out.Machines = append(out.Machines, e)
		if asJSON {
			continue
		}
		if i > 0 {
			fmt.Println()
		}
		fmt.Printf("== machine %s\n", machineLabel(m))
		if err != nil {
			fmt.Printf("(no answer: %v)\n", err)
			continue
		}
		self := uint64(0)
		if m.Self {
			self = d.ID()
		}
		if err := printPs(os.Stdout, snap, self); err != nil {
			return err
		}
	}
	if asJSON {
		return writeJSON(os.Stdout, out)
	}
	return nil
}

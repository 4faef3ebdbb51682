package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
)

const machinesUsage = `usage: chanos machines [--json] [--dir DIR]

Lists the machines of the cluster this machine's monitor is in, as the
monitor sees them: id, name, state, load (domains), the address of its
control link and the key id of its identity. CPU is the share of the
machine's CPU time that was busy, measured every 2 s. A monitor in no cluster
lists itself alone.

--json prints one JSON document on one line: {"cluster", "machines":
[{"id", "name", "addr", "identity", "version", "state", "domains",
"cpu", "self"}]}; a failure prints {"error": MESSAGE, "code": CODE} instead.
`

// runMachines runs 'chanos machines'.
func runMachines(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("machines", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	asJSON := fs.Bool("json", false, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("machines", "unexpected argument %q", fs.Arg(0))
	}
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	d, err := dialMonitor(ctx, *dir, "chanos machines")
	if err != nil {
		return err
	}
	defer d.Close()
	list, err := d.Machines(ctx)
	if err != nil {
		return fmt.Errorf("machines: %w", err)
	}
	if *asJSON {
		return writeJSON(os.Stdout, list)
	}
	if list.Cluster == "" {
		fmt.Println("not in a cluster: this machine alone")
	} else {
		fmt.Printf("cluster %s: %d machines\n", list.Cluster, len(list.Machines))
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MACHINE\tNAME\tSTATE\tDOMAINS\tCPU\tADDR\tIDENTITY\tVERSION")
	for _, m := range list.Machines {
		name := printable(m.Name)
		if m.Self {
			name += " (this one)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f%%\t%s\t%s\t%s\n", m.ID, orDash(name), m.State, m.Domains, 100*m.CPU, orDash(m.Addr), orDash(m.Identity), orDash(m.Version))
	}
	return tw.Flush()
}

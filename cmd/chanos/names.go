package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/monitor"
)

const namesUsage = `usage: chanos names [PREFIX] [--json] [--dir DIR]

Lists the names registered in this user's nameservice that start with
PREFIX (all of them by default), with the interface, its fingerprint
(docs/idl.md), the machine it lives on (by name, in a cluster) and the
domain of the export each names (for the names of this machine).

--json prints one JSON document on one line, an array of
{"name", "machine_id", "machine", "export_id", "iface", "fingerprint",
"domain", "program"} ([] when no name matches); a failure prints {"error": MESSAGE,
"code": CODE} instead (code no_monitor when no monitor runs), and the exit
status is not 0.
`

// nameEntry is one line of 'chanos names'.
type nameEntry struct {
	Name      string `json:"name"`
	MachineID string `json:"machine_id"`
	// Machine is the name of the machine, as the cluster's registry
	// gives it ("" when the registry does not list it).
	Machine  string `json:"machine,omitempty"`
	ExportID uint64 `json:"export_id"`
	Iface    string `json:"iface,omitempty"`
	// Fingerprint is the export's, as ps gives it (16 hex digits).
	Fingerprint string `json:"fingerprint,omitempty"`
	Domain      uint64 `json:"domain,omitempty"`
	Program     string `json:"program,omitempty"`
}

// runNames runs 'chanos names'.
func runNames(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("names", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	asJSON := fs.Bool("json", false, "")
	prefix, err := parseArgs(fs, args) // flags before or after the prefix
	if err != nil {
		return err
	}
	if len(prefix) > 1 {
		return usagef("names", "one prefix at most, got %q", prefix)
	}
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	c, err := dialMonitor(ctx, *dir, "chanos names")
	if err != nil {
		return err
	}
	defer c.Close()
	ns, err := nameservice.Connect(ctx, c, nameservice.ServiceName)
	if err != nil {
		return fmt.Errorf("names: %w", err)
	}
	defer ns.Close()
	list, err := ns.Names(ctx, append(prefix, "")[0])
	if err != nil {
		return fmt.Errorf("names: %w", err)
	}
	snap, err := c.Ps(ctx)
	if err != nil {
		return fmt.Errorf("names: %w", err)
	}
	machines := map[string]string{}
	if ml, err := c.Machines(ctx); err == nil {
		for _, m := range ml.Machines {
			machines[m.ID] = m.Name
		}
	}
	type owner struct {
		iface   string
		fp      string
		domain  uint64
		program string
	}
	exports := map[uint64]owner{}
	for _, d := range snap.Domains {
		for _, e := range d.Exports {
			exports[e.ExportID] = owner{e.Iface, e.Fingerprint, d.ID, d.Program}
		}
	}
	entries := []nameEntry{}
	for _, name := range list {
		ref, code, err := ns.Get(ctx, name)
		if err != nil {
			return fmt.Errorf("names: get %q: %w", name, err)
		}
		if code != monitor.NSOK {
			continue // removed since the list
		}
		e := nameEntry{Name: name, MachineID: fmt.Sprintf("%016x", ref.Machine), ExportID: ref.Export}
		e.Machine = machines[e.MachineID]
		if fmt.Sprintf("%016x", c.Machine()) == e.MachineID {
			if o, ok := exports[ref.Export]; ok {
				e.Iface, e.Fingerprint, e.Domain, e.Program = o.iface, o.fp, o.domain, o.program
			}
		}
		entries = append(entries, e)
	}
	if *asJSON {
		return writeJSON(os.Stdout, entries)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tIFACE\tFINGERPRINT\tDOMAIN\tPROGRAM\tEXPORT\tMACHINE")
	for _, e := range entries {
		domain := "-"
		if e.Domain != 0 {
			domain = fmt.Sprint(e.Domain)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s/%d\t%s\n", e.Name, orDash(e.Iface), orDash(e.Fingerprint), domain, orDash(printable(e.Program)), e.MachineID, e.ExportID, orDash(printable(e.Machine)))
	}
	return tw.Flush()
}

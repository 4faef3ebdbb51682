package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/chanos/chanos/cluster/etcd"
	"github.com/chanos/chanos/cluster/member"
	"github.com/chanos/chanos/monitor"
)

const monitorUsage = `usage: chanos monitor [--config FILE] [--dir DIR] [--log-level LEVEL] [QUOTA FLAGS]

Runs this user's monitor: domains export and bind services through it, and
it hosts the nameservice. It serves until SIGINT or SIGTERM.

  --config FILE      read flags from FILE: one per line, its name without
                     dashes, then its value ("cluster lab", "etcd = URLS",
                     "net-auth-only"); # comments; the command line wins
  --dir DIR          the monitor's directory (default: $CHANOS_DIR, else
                     $XDG_RUNTIME_DIR/chanos, else $TMPDIR/chanos-UID)
  --log-level LEVEL  debug, info, warn or error (default info)

Quotas (docs/quotas.md says what each defends). A count is per domain, or
for all domains together where it says total; sizes are bytes, or with a
suffix K, M or G (powers of 1024).

  --max-domains N              sessions, total (default %d)
  --max-ns-conns N             nameservice connections per domain (default %d)
  --max-total-ns-conns N       nameservice connections, total (default %d)
  --max-names N                names set through the nameservice, per domain (default %d)
  --max-total-names N          names set through the nameservice, total (default %d)
  --max-exports N              exports per domain (default %d)
  --max-total-exports N        exports, total (default %d)
  --max-pending-binds N        binds in progress per domain (default %d)
  --max-total-pending-binds N  binds and nameservice waits in progress, total (default %d)
  --max-total-watches N        nameservice watches, total (default %d)
  --max-conn-records N         connection records kept for ps per domain (default %d)
  --max-reply-queue SIZE       a session's socket send buffer (default %s)
  --max-reply-memory SIZE      memory of one domain's large replies (default %s)
  --max-total-reply-memory SIZE  memory of all large replies (default %s)
  --hello-timeout D            time to say hello (default %v)
  --idle-timeout D             silence before a session is pinged (default %v)
  --ping-timeout D             time to read a ping (default %v)

The monitor's resident memory stays under a bound computed from the
quotas (docs/quotas.md); the monitor logs it when it starts and sets the
Go runtime's soft memory limit to it unless GOMEMLIMIT is set.
`

func monitorUsageText() string {
	return fmt.Sprintf(monitorUsage+monitorClusterUsage, monitor.DefaultMaxDomains, monitor.DefaultMaxNSConns, monitor.DefaultMaxTotalNSConns,
		monitor.DefaultMaxNames, monitor.DefaultMaxTotalNames, monitor.DefaultMaxExports, monitor.DefaultMaxTotalExports,
		monitor.DefaultMaxPendingBinds, monitor.DefaultMaxTotalPendingBinds, monitor.DefaultMaxTotalWatches,
		monitor.DefaultMaxConnRecords, formatSize(monitor.DefaultMaxReplyQueue), formatSize(monitor.DefaultMaxReplyMemory),
		formatSize(monitor.DefaultMaxTotalReplyMemory), monitor.DefaultHelloTimeout, monitor.DefaultIdleTimeout,
		monitor.DefaultPingTimeout, etcd.DefaultTTL, etcd.DefaultKeepAlive)
}

// sizeFlag is a byte count given as a number with an optional K, M or G
// suffix (KiB, MiB and GiB are accepted too).
type sizeFlag int

func (s *sizeFlag) String() string { return formatSize(int(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

func parseSize(v string) (int, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(v)), "B"), "I")
	mult := 1
	switch {
	case strings.HasSuffix(t, "K"):
		mult = 1 << 10
	case strings.HasSuffix(t, "M"):
		mult = 1 << 20
	case strings.HasSuffix(t, "G"):
		mult = 1 << 30
	}
	if mult > 1 {
		t = t[:len(t)-1]
	}
	n, err := strconv.Atoi(t)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size: want a positive number of bytes, with an optional K, M or G", v)
	}
	return n * mult, nil
}

func formatSize(n int) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.Itoa(n)
}

// runMonitor runs 'chanos monitor'.
func runMonitor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("monitor", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	logLevel := fs.String("log-level", "info", "")
	cfg := monitor.Config{}.WithDefaults()
	spawnFlags(fs, &cfg.Spawn)
	counts := []struct {
		name string
		v    *int
	}{
		{"max-domains", &cfg.MaxDomains},
		{"max-ns-conns", &cfg.MaxNSConns},
		{"max-total-ns-conns", &cfg.MaxTotalNSConns},
		{"max-names", &cfg.MaxNames},
		{"max-total-names", &cfg.MaxTotalNames},
		{"max-exports", &cfg.MaxExports},
		{"max-total-exports", &cfg.MaxTotalExports},
		{"max-pending-binds", &cfg.MaxPendingBinds},
		{"max-total-pending-binds", &cfg.MaxTotalPendingBinds},
		{"max-total-watches", &cfg.MaxTotalWatches},
		{"max-conn-records", &cfg.MaxConnRecords},
	}
	for _, c := range counts {
		fs.IntVar(c.v, c.name, *c.v, "")
	}
	sizes := []struct {
		name string
		v    *int
	}{
		{"max-reply-queue", &cfg.MaxReplyQueue},
		{"max-reply-memory", &cfg.MaxReplyMemory},
		{"max-total-reply-memory", &cfg.MaxTotalReplyMemory},
	}
	for _, c := range sizes {
		fs.Var((*sizeFlag)(c.v), c.name, "")
	}
	fs.DurationVar(&cfg.HelloTimeout, "hello-timeout", cfg.HelloTimeout, "")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "")
	fs.DurationVar(&cfg.PingTimeout, "ping-timeout", cfg.PingTimeout, "")
	var cf clusterFlags
	cf.register(fs)
	config := fs.String("config", "", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *config != "" {
		if err := applyConfig(fs, *config); err != nil {
			return usagef("monitor", "%v", err)
		}
	}
	if fs.NArg() > 0 {
		return usagef("monitor", "unexpected argument %q", fs.Arg(0))
	}
	if err := cf.check(); err != nil {
		return err
	}
	for _, c := range counts {
		if *c.v <= 0 {
			return usagef("monitor", "--%s must be positive, not %d", c.name, *c.v)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"hello-timeout", cfg.HelloTimeout}, {"idle-timeout", cfg.IdleTimeout}, {"ping-timeout", cfg.PingTimeout}} {
		if d.v <= 0 {
			return usagef("monitor", "--%s must be positive, not %v", d.name, d.v)
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("monitor", "--log-level %q: want debug, info, warn or error", *logLevel)
	}
	cfg.Dir = *dir
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if os.Getenv("GOMEMLIMIT") == "" {
		// The collector works harder near the bound rather than let
		// garbage pass it.
		debug.SetMemoryLimit(cfg.MemoryBound())
	}
	if cf.cluster == "" {
		return monitor.Run(ctx, cfg)
	}
	return runClusterMonitor(ctx, &cf, cfg)
}

// runClusterMonitor runs the monitor as a machine of the cluster cf names
// until ctx ends, then leaves the cluster.
func runClusterMonitor(ctx context.Context, cf *clusterFlags, cfg monitor.Config) error {
	mc, err := cf.config(cfg.Logger)
	if err != nil {
		return err
	}
	return member.Run(ctx, mc, cfg)
}

// applyConfig sets fs's flags from a configuration file: one flag per
// line, its name without dashes, then its value ("cluster lab", "etcd =
// https://10.0.0.1:2379", a lone "net-auth-only" for a boolean); blank
// lines and lines starting with # are skipped. A flag given on the command
// line wins over the file. A repeatable flag (spawn-allow) may be given on
// several lines.
func applyConfig(fs *flag.FlagSet, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, hasValue := strings.Cut(line, " ")
		name = strings.TrimSpace(name)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.ContainsAny(strings.TrimSpace(k), " \t") {
			name, value, hasValue = strings.TrimSpace(k), v, true
		}
		value = strings.TrimSpace(value)
		f := fs.Lookup(name)
		switch {
		case f == nil || name == "config":
			return fmt.Errorf("config %s:%d: no flag %q of chanos monitor", file, i+1, name)
		case onCommandLine[name]:
			continue
		case !hasValue:
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
				return fmt.Errorf("config %s:%d: %s needs a value", file, i+1, name)
			}
			value = "true"
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("config %s:%d: %s: %w", file, i+1, name, err)
		}
	}
	return nil
}

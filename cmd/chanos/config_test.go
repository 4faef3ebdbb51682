package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A config file sets flags by name, a lone name sets a boolean, the
// command line wins, repeatable flags add up, and mistakes name their
// line.
func TestApplyConfig(t *testing.T) {
	newFS := func() (*flag.FlagSet, *string, *int, *bool, *time.Duration, *listFlag) {
		fs := flag.NewFlagSet("monitor", flag.ContinueOnError)
		var allow listFlag
		fs.Var(&allow, "spawn-allow", "")
		return fs, fs.String("cluster", "", ""), fs.Int("max-domains", 7, ""), fs.Bool("net-auth-only", false, ""),
			fs.Duration("lease-ttl", time.Second, ""), &allow
	}
	file := filepath.Join(t.TempDir(), "monitor.conf")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# a comment\ncluster lab\n\nmax-domains = 9\nnet-auth-only\nlease-ttl 3s\nspawn-allow /opt/a\nspawn-allow=/opt/b\n")
	fs, cluster, maxDomains, authOnly, ttl, allow := newFS()
	if err := fs.Parse([]string{"--max-domains", "11"}); err != nil {
		t.Fatal(err)
	}
	if err := applyConfig(fs, file); err != nil {
		t.Fatal(err)
	}
	if *cluster != "lab" || *maxDomains != 11 || !*authOnly || *ttl != 3*time.Second || strings.Join(*allow, ",") != "/opt/a,/opt/b" {
		t.Errorf("cluster %q, max-domains %d (the command line's 11), net-auth-only %v, lease-ttl %v, spawn-allow %v",
			*cluster, *maxDomains, *authOnly, *ttl, *allow)
	}
	for body, want := range map[string]string{
		"no-such-flag 1\n":    `:1: no flag "no-such-flag"`,
		"\ncluster\n":         ":2: cluster needs a value",
		"max-domains lots\n":  ":1: max-domains",
		"config other.conf\n": `no flag "config"`,
	} {
		write(body)
		fs, _, _, _, _, _ := newFS()
		if err := applyConfig(fs, file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: %v, want an error with %q", body, err, want)
		}
	}
	if err := applyConfig(flag.NewFlagSet("x", flag.ContinueOnError), filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing config file: no error")
	}
}

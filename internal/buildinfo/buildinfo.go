// Package buildinfo says which chanos a command was built from, for the
// commands' --version: the chanos module's version as the Go toolchain
// recorded it, else the commit of the checkout, else "devel".
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Module is the chanos module's path.
const Module = "github.com/chanos/chanos"

// Version returns the version of the chanos module the running program
// was built from:
//
//   - the module's version, when the program was built from a version of
//     it (go install ...@v1.2.3, or a module that requires it);
//   - else the commit of the checkout it was built in (12 hex digits,
//     "-dirty" after it when the tree had changes), when the toolchain
//     stamped it (go build in a git checkout, without -buildvcs=false);
//   - else "devel": a module replaced by a directory, or a build without
//     version control information.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return version(bi)
}

// version is Version for given build information.
func version(bi *debug.BuildInfo) string {
	mod := &bi.Main
	if mod.Path != Module {
		// A command linked into another module's program: chanos is
		// among its dependencies.
		mod = nil
		for _, d := range bi.Deps {
			if d.Path == Module {
				mod = d
				break
			}
		}
		if mod == nil {
			return "devel"
		}
	}
	if r := mod.Replace; r != nil {
		// go tool chanosc in a module that replaces chanos: the
		// replacement is what was built.
		if r.Version == "" || r.Version == "(devel)" {
			return "devel" // a directory: its version says nothing
		}
		return r.Version
	}
	if v := mod.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// Line returns what `PROGRAM --version` prints: the program, the version
// and the Go toolchain that built it, as in "chanos v0.2.0 go1.26.8".
func Line(program string) string {
	return program + " " + Version() + " " + runtime.Version()
}

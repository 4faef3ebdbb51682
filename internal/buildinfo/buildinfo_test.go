package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersion(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}}
	dirty := append(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	for _, c := range []struct {
		what string
		bi   debug.BuildInfo
		want string
	}{
		{"go install @version", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "v1.2.3"}}, "v1.2.3"},
		{"a checkout's commit", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}, Settings: rev}, "0123456789ab"},
		{"a changed checkout", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}, Settings: dirty}, "0123456789ab-dirty"},
		{"no version control", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}}, "devel"},
		{"go tool chanosc in a module that requires chanos", debug.BuildInfo{
			Main: debug.Module{Path: Module, Version: "v1.4.0"}}, "v1.4.0"},
		{"go tool chanosc in a module that replaces chanos by a directory", debug.BuildInfo{
			Main: debug.Module{Path: Module, Version: "v0.0.0", Replace: &debug.Module{Path: "/src/chanos", Version: "(devel)"}}}, "devel"},
		{"a program of a module that requires chanos", debug.BuildInfo{
			Main: debug.Module{Path: "example.com/counter", Version: "(devel)"},
			Deps: []*debug.Module{{Path: Module, Version: "v1.4.0"}}}, "v1.4.0"},
		{"a program of a module that replaces chanos by a directory", debug.BuildInfo{
			Main: debug.Module{Path: "example.com/counter", Version: "(devel)"},
			Deps: []*debug.Module{{Path: Module, Version: "v0.0.0", Replace: &debug.Module{Path: "/src/chanos"}}}}, "devel"},
		{"a program of a module that replaces chanos by a fork", debug.BuildInfo{
			Main: debug.Module{Path: "example.com/counter", Version: "(devel)"},
			Deps: []*debug.Module{{Path: Module, Version: "v1.4.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.4.1"}}}}, "v1.4.1"},
	} {
		if got := version(&c.bi); got != c.want {
			t.Errorf("%s: %q, want %q", c.what, got, c.want)
		}
	}
}

// Package docs holds the specifications; its tests check the facts they
// state that the code also states, so that a change to one shows in the
// other: a reader of the docs never learns a version or a code that the
// code no longer has.
package docs

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	proto "github.com/chanos/chanos/internal/protocol/monitor"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Where the docs give the version of the monitor protocol that domains
// speak, it is the version the monitor accepts at hello (it refuses any
// other), and libchanos says the same one.
func TestMonitorProtocolVersion(t *testing.T) {
	want := strconv.Itoa(proto.ProtocolVersion)
	domainC := read(t, "../c/src/domain.c")
	if m := regexp.MustCompile(`#define PROTOCOL_VERSION (\d+)`).FindStringSubmatch(domainC); m == nil || m[1] != want {
		t.Fatalf("c/src/domain.c's PROTOCOL_VERSION = %v, Go's ProtocolVersion %s", m, want)
	}
	for _, c := range []struct{ file, re string }{
		{"c-domains.md", "says `hello` with protocol version (\\d+)"},
		{"monitor-protocol.md", "the protocol\nversion the domain speaks, which is (\\d+)"},
		{"../c/include/chanos.h", `says hello \(protocol version (\d+)\)`},
	} {
		ms := regexp.MustCompile(c.re).FindAllStringSubmatch(read(t, c.file), -1)
		if len(ms) == 0 {
			t.Errorf("%s: no %q", c.file, c.re)
		}
		for _, m := range ms {
			if m[1] != want {
				t.Errorf("%s: %q: the version is %s, the code's %s", c.file, m[0], m[1], want)
			}
		}
	}
}

// c-domains.md's table of errors lists every domain code chanos.h defines
// (-4301 on), with its value.
func TestCDomainErrors(t *testing.T) {
	header := read(t, "../c/include/chanos.h")
	doc := read(t, "c-domains.md")
	defs := regexp.MustCompile(`(?m)^#define (CHANOS_ERR_[A-Z_]+) +\((-43\d\d)\)`).FindAllStringSubmatch(header, -1)
	if len(defs) == 0 {
		t.Fatal("chanos.h defines no domain codes")
	}
	for _, d := range defs {
		row := "| `" + d[1] + "` | " + d[2] + " |"
		if !strings.Contains(doc, row) {
			t.Errorf("c-domains.md's errors table has no row %q", row)
		}
	}
}

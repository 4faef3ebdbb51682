package monitor

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"

	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// policy says who may bind an export (docs/security.md). The zero policy
// is the default: any domain of the monitor may bind the export, by its
// name or by its iref.
type policy struct {
	// private: a bind by name is denied; only a bind by the export's
	// iref, token and all, succeeds.
	private bool
	// uids, when not empty, lists the only uids (SO_PEERCRED) whose
	// domains may bind.
	uids []uint32
	// programs, when not empty, lists the only programs (as hello named
	// them) whose domains may bind.
	programs []string
}

// newPolicy reads the policy of an export call.
func newPolicy(c *proto.ExportCall) (policy, error) {
	p := policy{private: c.Private}
	if len(c.Uids) > 0 {
		p.uids = slices.Clone(c.Uids)
	}
	if len(c.Programs) > 0 {
		for _, prog := range strings.Split(string(c.Programs), "\n") {
			switch {
			case prog == "":
				return policy{}, errors.New("an empty program name in the allowed programs (one per line, no blank lines)")
			case len(prog) > proto.MaxHelloProgramLen:
				return policy{}, fmt.Errorf("an allowed program name of %d bytes; hello's are at most %d", len(prog), proto.MaxHelloProgramLen)
			case strings.IndexByte(prog, 0) >= 0:
				return policy{}, errors.New("a NUL byte in an allowed program name")
			}
			p.programs = append(p.programs, prog)
		}
	}
	return p, nil
}

// String describes the policy for the log, as "public", "private" and
// the lists.
func (p policy) String() string {
	var b strings.Builder
	if p.private {
		b.WriteString("private")
	} else {
		b.WriteString("public")
	}
	if len(p.uids) > 0 {
		fmt.Fprintf(&b, " uids=%v", p.uids)
	}
	if len(p.programs) > 0 {
		fmt.Fprintf(&b, " programs=%q", p.programs)
	}
	return b.String()
}

// sameToken compares two tokens in constant time: how long a bind takes
// to be denied tells nothing of how much of a guessed token was right.
func sameToken(a, b wire.Iref) bool {
	return subtle.ConstantTimeCompare(a.Token[:], b.Token[:]) == 1
}

// admit decides whether s may bind e: by name (byName), or by an iref
// whose token has already been checked. It returns nil or the bind's
// denied error; what names the bind (the name, or the export) is label.
func (e *export) admit(s *session, byName bool, label string) error {
	p := e.policy
	if byName && p.private {
		return fail(proto.StatusDenied, "bind %s: the export is private: only a bind by its iref may connect to it, and the name gives no token", label)
	}
	if len(p.uids) > 0 && !slices.Contains(p.uids, s.uid) {
		return fail(proto.StatusDenied, "bind %s: uid %d is not among the export's allowed uids", label, s.uid)
	}
	if len(p.programs) > 0 && !slices.Contains(p.programs, s.program) {
		return fail(proto.StatusDenied, "bind %s: program %q is not among the export's allowed programs", label, s.program)
	}
	return nil
}

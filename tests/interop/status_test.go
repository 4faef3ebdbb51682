package interop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
)

// statusCodes are the codes the status tests send each way: every
// canonical code and two of an application's.
var statusCodes = []chanos.Code{
	chanos.CodeCanceled, chanos.CodeUnknown, chanos.CodeInvalidArgument,
	chanos.CodeDeadlineExceeded, chanos.CodeNotFound, chanos.CodeAlreadyExists,
	chanos.CodePermissionDenied, chanos.CodeResourceExhausted,
	chanos.CodeFailedPrecondition, chanos.CodeAborted, chanos.CodeOutOfRange,
	chanos.CodeUnimplemented, chanos.CodeInternal, chanos.CodeUnavailable,
	chanos.CodeDataLoss, chanos.CodeUnauthenticated,
	chanos.CodeApplication, chanos.CodeApplication + 42,
}

// A C server's error replies reach a Go client with their codes, matched
// by errors.Is and read by CodeOf.
func TestStatusCodesCServerGoClient(t *testing.T) {
	prog := cProg(t, "status_test")
	dir := startMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	srv := spawn(t, dir, prog, "serve", "c.status")
	if l := srv.Line(t); l != "serving c.status" {
		t.Fatalf("status_test printed %q", l)
	}
	c, err := pingpong.Connect(ctx, join(t, dir), "c.status")
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range statusCodes {
		_, err := c.Echo(ctx, uint64(code))
		var re *chanos.RemoteError
		if !errors.Is(err, code) || chanos.CodeOf(err) != code || !errors.As(err, &re) || re.Detail != fmt.Sprintf("c detail %d", uint64(code)) {
			t.Errorf("echo(%d) from the C server = %v, want code %v", uint64(code), err, code)
		}
	}
	if v, err := c.Echo(ctx, 0); err != nil || v != 0 {
		t.Errorf("echo(0) = %d, %v", v, err)
	}
	c.Close()
	if !srv.wait(t, 0) {
		t.FailNow()
	}
}

// statusServer fails echo(v) with code v, and with the context's errors,
// a plain error and ErrUnsupported on request.
type statusServer struct{ pingpong.UnimplementedServer }

const (
	echoDeadline = 1 << 40
	echoPlain    = 1<<40 + 1
	echoUnsupp   = 1<<40 + 2
)

func (statusServer) Echo(ctx context.Context, v uint64) (uint64, error) {
	switch v {
	case 0:
		return 0, nil
	case echoDeadline:
		return 0, fmt.Errorf("slow store: %w", context.DeadlineExceeded)
	case echoPlain:
		return 0, errors.New("plain failure")
	case echoUnsupp:
		return 0, errors.ErrUnsupported
	}
	return 0, chanos.Errorf(chanos.Code(v), "go detail %d", v)
}

// A Go server's errors reach a C client with their codes: those it
// chose, and those CodeOf gives its other errors.
func TestStatusCodesGoServerCClient(t *testing.T) {
	prog := cProg(t, "status_test")
	dir := startMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	l, err := pingpong.Export(ctx, join(t, dir), "go.status")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go pingpong.Serve(ctx, l, statusServer{})
	args := []string{"call", "go.status", "0"}
	var want []string
	for _, code := range statusCodes {
		args = append(args, strconv.FormatUint(uint64(code), 10))
		name := code.String()
		if !code.Canonical() {
			name = "application code"
		}
		want = append(want, fmt.Sprintf("%d: code %d (%s): go detail %d", uint64(code), uint64(code), name, uint64(code)))
	}
	for _, v := range []uint64{echoDeadline, echoPlain, echoUnsupp} {
		args = append(args, strconv.FormatUint(v, 10))
	}
	want = append(want,
		fmt.Sprintf("%d: code 4 (deadline exceeded): slow store: context deadline exceeded", uint64(echoDeadline)),
		fmt.Sprintf("%d: code 2 (unknown): plain failure", uint64(echoPlain)),
		fmt.Sprintf("%d: code 12 (unimplemented): unsupported operation", uint64(echoUnsupp)))
	out := run(t, dir, prog, args...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || lines[0] != "0: ok 0" {
		t.Fatalf("status_test printed:\n%s", out)
	}
	for i, w := range want {
		if i+1 >= len(lines) || lines[i+1] != w {
			t.Errorf("line %d: want %q; status_test printed:\n%s", i+1, w, out)
			break
		}
	}
}

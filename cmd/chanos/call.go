package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/gen/dynamic"
	"github.com/chanos/chanos/idl"
	"github.com/chanos/chanos/interfaces"
	"github.com/chanos/chanos/wire"
)

const callUsage = `usage: chanos call [-i INCLUDE.if]... [--meta KEY=VALUE]... [--timeout D] [--dir DIR]
                   [FILE.if] NAME RPC [ARGS]

Calls the rpc RPC of the service exported under NAME, as curl does for
HTTP: no generated code is needed. The interface comes from FILE.if (a
bare name of a bundled interface, as health.if or kv.if, needs no file
either), or, without FILE.if, from the reflection service of NAME's
domain (NAME.reflection, as 'chanos describe NAME' prints it). ARGS is a
JSON object of the rpc's in arguments ({} if left out; - reads it from
stdin); the out arguments are printed as one JSON object on one line. A
one-way message of the interface is sent instead, and nothing printed.

Values: integers as numbers (or strings, for 64-bit ones past what JSON
numbers hold exactly), enums by name, structs as objects, arrays as
arrays; an array of uint8 or char as a string of its bytes (or
{"base64": "..."}, printed so when it is not UTF-8); an iref as
{"machine", "export", "token"}. An argument left out is its type's zero.
Capabilities cannot be passed this way. The interface's name and
fingerprint must match the export's, as for any client.

  -i FILE           an include file of type declarations of FILE.if (as
                    chanosc -i)
  --meta KEY=VALUE  metadata the call carries (repeatable); the reply's
                    metadata, if any, is printed on stderr
  --timeout D       the call's deadline, and how long to wait for NAME
                    (a Go duration; default 10s)
  --messages N      then print the next N one-way messages the peer sends
                    (-1: every one), a JSON object a line:
                    {"message": NAME, "args": {...}}; until they have
                    come, the peer closes, an interrupt, or --wait
  --wait D          the longest --messages waits (a Go duration; default
                    0: until an interrupt)
  --json            a failure is one JSON object on stdout instead:
                    {"error": MESSAGE, "code": CODE}; an error reply's
                    CODE is its status code's name ("not_found")
`

// runCall runs 'chanos call'.
func runCall(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	timeout := fs.Duration("timeout", 10*time.Second, "")
	fs.Bool("json", false, "") // read by report, through jsonRequested
	var includes, metas listFlag
	fs.Var(&includes, "i", "")
	fs.Var(&metas, "meta", "")
	messages := fs.Int("messages", 0, "")
	wait := fs.Duration("wait", 0, "")
	// Flags may come after the arguments too ("-" alone is ARGS, stdin).
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *wait < 0 {
		return usagef("call", "--wait must not be negative")
	}
	var file string
	if len(pos) >= 3 && isInterfaceFile(pos[0]) {
		file, pos = pos[0], pos[1:]
	}
	if len(pos) < 2 || len(pos) > 3 {
		return usagef("call", "give [FILE.if] NAME RPC and at most ARGS")
	}
	if file == "" && len(includes) > 0 {
		return usagef("call", "-i is for FILE.if's include files; give FILE.if")
	}
	name, rpc := pos[0], pos[1]
	if *timeout <= 0 {
		return usagef("call", "--timeout must be positive")
	}
	md := chanos.Metadata{}
	for _, m := range metas {
		k, v, ok := strings.Cut(m, "=")
		if !ok {
			return usagef("call", "--meta %q: want KEY=VALUE", m)
		}
		md[k] = v
	}
	values, err := callArgs(append(pos[2:], "")[0], os.Stdin)
	if err != nil {
		return usagef("call", "ARGS: %v", err)
	}
	var iface *idl.Interface
	var frame *dynamic.Frame
	if file != "" {
		// Built here, so that a value that does not fit its type is the
		// command line's mistake, told before any connection.
		if iface, err = loadInterface(file, includes); err != nil {
			return fmt.Errorf("call: %w", err)
		}
		if frame, err = callFrame(iface, rpc, values); err != nil {
			return err
		}
	}
	interrupt := ctx // what ends the wait for --messages
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// The domain's call timeout is how long Connect waits for NAME.
	d, err := dialMonitor(ctx, *dir, "chanos call", chanos.WithCallTimeout(*timeout))
	if err != nil {
		return err
	}
	defer d.Close()
	if file == "" {
		desc, err := describeExport(ctx, d, name)
		if err != nil {
			return fmt.Errorf("call: %w", err)
		}
		iface = desc.iface
		if frame, err = callFrame(iface, rpc, values); err != nil {
			return err
		}
	}
	c, err := chanos.Connect(ctx, d, name, chanos.Interface{
		Name: iface.Name, MaxFrameSize: int(iface.MaxFrameSize()), Fingerprint: iface.Fingerprint(),
	})
	if err != nil {
		return fmt.Errorf("call: %w", err)
	}
	defer c.Close()
	if len(md) > 0 {
		ctx = chanos.WithMetadata(ctx, md)
	}
	if !frame.Msg.RPC {
		if err := c.Send(ctx, frame); err != nil {
			return fmt.Errorf("call: %w", err)
		}
	} else {
		var replyMD chanos.Metadata
		reply := frame.Reply()
		if err := c.Call(chanos.CaptureReplyMetadata(ctx, &replyMD), frame, reply); err != nil {
			return fmt.Errorf("call: %w", err)
		}
		printMetadata(os.Stderr, replyMD)
		if err := writeJSON(os.Stdout, reply.Values); err != nil {
			return err
		}
	}
	return followMessages(interrupt, c, iface, *messages, *wait)
}

// followMessages prints the next n one-way messages c's peer sends (n < 0:
// every one), one JSON object a line, {"message": NAME, "args": {...}},
// as gRPC's server streams print in grpcurl. It stops early, with no
// error, when the peer closes, ctx ends (an interrupt) or wait (when not
// 0) has passed. A call from the peer is answered unimplemented: the
// command serves nothing.
func followMessages(ctx context.Context, c *chanos.Conn, iface *idl.Interface, n int, wait time.Duration) error {
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	for printed := 0; n < 0 || printed < n; {
		var msg *dynamic.Frame
		err := c.ReceiveFunc(ctx, func(in *chanos.Incoming) error {
			defer wire.CloseCaps(in.Caps) // no value of this command holds one
			if in.Kind != wire.KindMessage {
				return c.Reply(ctx, in, nil, chanos.Errorf(chanos.CodeUnimplemented, "chanos call serves no rpcs"))
			}
			f, err := dynamic.Message(iface, in.Header.Msg)
			if err != nil {
				return err
			}
			if err := f.Decode(in.Frame, in.Caps); err != nil {
				return err
			}
			msg = f
			return nil
		})
		switch {
		case err == nil && msg == nil:
			continue
		case err == nil:
			line := struct {
				Message string         `json:"message"`
				Args    map[string]any `json:"args"`
			}{msg.Msg.Name, msg.Values}
			if err := writeJSON(os.Stdout, line); err != nil {
				return err
			}
			printed++
		case ctx.Err() != nil, errors.Is(err, chanos.ErrClosed):
			return nil
		default:
			return fmt.Errorf("call: receive: %w", err)
		}
	}
	return nil
}

// isInterfaceFile reports whether a command-line argument names an
// interface file rather than a service: it ends in .if.
func isInterfaceFile(arg string) bool { return strings.HasSuffix(arg, ".if") }

// callFrame is the frame of rpc (or message) of iface with values, or
// a usage error: the command line's mistake.
func callFrame(iface *idl.Interface, rpc string, values map[string]any) (*dynamic.Frame, error) {
	frame, err := dynamic.Call(iface, rpc, values)
	if err != nil {
		return nil, usagef("call", "%v", err)
	}
	var scratch wire.Buffer
	if err := frame.Encode(&scratch); err != nil {
		return nil, usagef("call", "ARGS: %v", err)
	}
	return frame, nil
}

// loadInterface compiles the interface file at path, with includes; a
// bare file name that is no file here, but one of the bundled interfaces
// ("kv.if"), is the bundled one.
func loadInterface(path string, includes []string) (*idl.Interface, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && !strings.ContainsRune(path, '/') {
		if data, err := interfaces.Files.ReadFile(path); err == nil {
			return idl.LoadIncluding(idl.Source{Name: path, Data: data}, includes, idl.Options{})
		}
	}
	return idl.Load(path, includes, idl.Options{})
}

// callArgs reads ARGS: the JSON object arg, or stdin's for "-", {} for "".
func callArgs(arg string, stdin io.Reader) (map[string]any, error) {
	var r io.Reader = strings.NewReader(arg)
	switch arg {
	case "":
		return map[string]any{}, nil
	case "-":
		r = stdin
	}
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	if v == nil {
		v = map[string]any{}
	}
	return v, nil
}

// printMetadata prints md as "reply metadata: KEY=VALUE" lines, by key.
func printMetadata(w io.Writer, md chanos.Metadata) {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "reply metadata: %s=%s\n", k, printable(md[k]))
	}
}

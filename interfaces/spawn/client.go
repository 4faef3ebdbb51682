package spawn

// This file is written by hand, beside the generated code: the error
// codes of the spawn service and typed calls for Go clients, which the
// IDL cannot say.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/wire"
)

// ServicePrefix is the class of the spawn services' names: every monitor
// exports its spawn service as ServicePrefix + "." + its machine id in
// decimal, so that a nameservice count of the class "spawnd" is the
// number of machines that can spawn.
const ServicePrefix = "spawnd"

// ServiceName returns the name of machine's spawn service.
func ServiceName(machine uint64) string {
	return ServicePrefix + "." + strconv.FormatUint(machine, 10)
}

// The spawn service's error codes: the errval out argument of spawn,
// wait, kill and logs (docs/spawn.md). 0 is success.
const (
	CodeOK          wire.Errval = 0 // success
	CodeNotFound    wire.Errval = 1 // no such id (never spawned, or forgotten)
	CodeDenied      wire.Errval = 2 // the spawn policy refuses the program
	CodeInvalid     wire.Errval = 3 // a bad argument
	CodeExhausted   wire.Errval = 4 // a quota is reached
	CodeTimeout     wire.Errval = 5 // the call's deadline passed first
	CodeFailed      wire.Errval = 6 // the program could not be started
	CodeUnavailable wire.Errval = 7 // the monitor is shutting down, or a limit the machine does not offer
)

// Errors of the spawn service, matched with errors.Is against what the
// calls of this file return.
var (
	ErrNotFound    = errors.New("spawn: no such process")
	ErrDenied      = errors.New("spawn: denied by the spawn policy")
	ErrInvalid     = errors.New("spawn: invalid argument")
	ErrExhausted   = errors.New("spawn: resource exhausted")
	ErrFailed      = errors.New("spawn: the program could not be started")
	ErrUnavailable = errors.New("spawn: the spawn service is unavailable")
)

// Error returns the error code stands for, with detail (may be empty):
// nil for CodeOK. CodeTimeout matches context.DeadlineExceeded.
func Error(code wire.Errval, detail string) error {
	var base error
	switch code {
	case CodeOK:
		return nil
	case CodeNotFound:
		base = ErrNotFound
	case CodeDenied:
		base = ErrDenied
	case CodeInvalid:
		base = ErrInvalid
	case CodeExhausted:
		base = ErrExhausted
	case CodeTimeout:
		base = fmt.Errorf("spawn: %w", context.DeadlineExceeded)
	case CodeFailed:
		base = ErrFailed
	case CodeUnavailable:
		base = ErrUnavailable
	default:
		base = fmt.Errorf("spawn: unknown error code %d", uint64(code))
	}
	// The server's detail usually begins with base's own words.
	detail = strings.TrimPrefix(strings.TrimPrefix(detail, base.Error()), ": ")
	if detail == "" {
		return base
	}
	return fmt.Errorf("%w: %s", base, detail)
}

// Code returns the code of err, an error of this package (CodeFailed for
// any other).
func Code(err error) wire.Errval {
	switch {
	case err == nil:
		return CodeOK
	case errors.Is(err, ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ErrDenied):
		return CodeDenied
	case errors.Is(err, ErrInvalid):
		return CodeInvalid
	case errors.Is(err, ErrExhausted):
		return CodeExhausted
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	case errors.Is(err, ErrUnavailable):
		return CodeUnavailable
	}
	return CodeFailed
}

// Dial connects to the spawn service of d's machine, waiting for it
// until ctx ends.
func Dial(ctx context.Context, d *chanos.Domain) (*Conn, error) {
	return Connect(ctx, d, ServiceName(d.Machine()))
}

// DialMachine connects to the spawn service of machine, another machine
// of d's cluster or d's own: over the net interconnect for another
// (docs/spawn.md, "Other machines").
func DialMachine(ctx context.Context, d *chanos.Domain, machine uint64) (*Conn, error) {
	return Connect(ctx, d, ServiceName(machine))
}

// Request describes a program to spawn.
type Request struct {
	Program string   // an absolute path, or a name looked up in the monitor's PATH
	Args    []string // argv[1:]
	Env     []string // "K=V", added to the monitor's environment
	Dir     string   // working directory; "" for the monitor's
	CPUs    string   // CPU list to pin it to ("0-2,5"); "" for none
	// Mem is the memory limit in bytes (0 for none): a cgroup's where the
	// machine offers cgroups, else an address-space rlimit.
	Mem uint64
	CPU uint64 // CPU-time limit in seconds (an rlimit); 0 for none
	// CPURate is the CPU bandwidth limit in thousandths of a CPU (1500: one
	// and a half), 0 for none; it needs cgroups (ErrUnavailable without).
	CPURate uint32
	Name    string // a label for list
	// Hash, when set, names the program by the SHA-256 (lowercase hex) of
	// a file shipped into the target's cache (Ship): the cached file runs,
	// and Program is only its argv[0] and label.
	Hash string
}

// Started is what a spawn returns: the process's id in the spawn service
// and its pid.
type Started struct {
	ID  uint64
	PID int
}

// joinList joins list with '\0' for the wire; an entry may not hold one.
func joinList(what string, list []string) ([]byte, error) {
	for _, s := range list {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("%w: %s %q holds a NUL byte", ErrInvalid, what, s)
		}
	}
	return []byte(strings.Join(list, "\x00")), nil
}

// SplitList splits a '\0'-separated list of the wire; empty gives none.
func SplitList(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// Start spawns r and returns its id at once, without waiting for the
// program to do anything.
func (c *Client) Start(ctx context.Context, r Request) (Started, error) {
	args, err := joinList("argument", r.Args)
	if err != nil {
		return Started{}, err
	}
	env, err := joinList("environment entry", r.Env)
	if err != nil {
		return Started{}, err
	}
	if len(args) > MaxSpawnArgsLen || len(env) > MaxSpawnEnvLen {
		return Started{}, fmt.Errorf("%w: arguments (%d bytes, at most %d) or environment (%d bytes, at most %d) too long",
			ErrInvalid, len(args), MaxSpawnArgsLen, len(env), MaxSpawnEnvLen)
	}
	var (
		id     uint64
		pid    int32
		code   wire.Errval
		detail []byte
	)
	if r.Hash != "" {
		id, pid, code, detail, err = c.SpawnShipped(ctx, r.Hash, r.Program, args, env, r.Dir, r.CPUs, r.Mem, r.CPU, r.CPURate, r.Name)
	} else {
		id, pid, code, detail, err = c.Spawn(ctx, r.Program, args, env, r.Dir, r.CPUs, r.Mem, r.CPU, r.CPURate, r.Name)
	}
	if err != nil {
		return Started{}, fmt.Errorf("spawn %s: %w", r.Program, err)
	}
	if err := Error(code, string(detail)); err != nil {
		return Started{}, fmt.Errorf("spawn %s: %w", r.Program, err)
	}
	return Started{ID: id, PID: int(pid)}, nil
}

// Exit is how a spawned program ended.
type Exit struct {
	Code   int            // exit status; -1 when a signal ended it
	Signal syscall.Signal // the signal that ended it, or 0
}

// String says how the program ended, as the CLI prints it.
func (e Exit) String() string {
	if e.Signal != 0 {
		return "signal " + e.Signal.String()
	}
	return "exit status " + strconv.Itoa(e.Code)
}

// WaitExit waits until process id has ended, or ctx ends (then the error
// matches context.DeadlineExceeded or context.Canceled).
func (c *Client) WaitExit(ctx context.Context, id uint64) (Exit, error) {
	code, sig, ev, err := c.Wait(ctx, id)
	if err != nil {
		return Exit{}, fmt.Errorf("wait %d: %w", id, err)
	}
	if err := Error(ev, ""); err != nil {
		return Exit{}, fmt.Errorf("wait %d: %w", id, err)
	}
	return Exit{Code: int(code), Signal: syscall.Signal(sig)}, nil
}

// Signal sends sig to process id.
func (c *Client) Signal(ctx context.Context, id uint64, sig syscall.Signal) error {
	ev, err := c.Kill(ctx, id, int32(sig))
	if err == nil {
		err = Error(ev, "")
	}
	if err != nil {
		return fmt.Errorf("kill %d: %w", id, err)
	}
	return nil
}

// Output returns the output of process id from offset from: data, the
// offset it starts at (above from when older output was dropped), and
// whether the program has ended and all its output has been returned.
// With follow, it waits for new output, the program's end, or ctx.
func (c *Client) Output(ctx context.Context, id, from uint64, follow bool) (data []byte, start uint64, done bool, err error) {
	data, start, done, ev, err := c.Logs(ctx, id, from, follow)
	if err == nil {
		err = Error(ev, "")
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("logs %d: %w", id, err)
	}
	return data, start, done, nil
}

// Proc describes one spawned process, as list returns it.
type Proc struct {
	// Machine is the id of the machine whose spawn service started it;
	// set by a client that lists several machines (chanos ps --all).
	Machine string   `json:"machine,omitempty"`
	ID      uint64   `json:"id"`
	PID     int      `json:"pid"`
	Name    string   `json:"name,omitempty"`
	Program string   `json:"program"`
	Args    []string `json:"args,omitempty"`
	// State is "running", "exited" or "signalled".
	State    string `json:"state"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	// Domain is the id of the domain the process became when it joined
	// the monitor (matched by pid), or 0 while it has not.
	Domain    uint64    `json:"domain,omitempty"`
	StartedBy Caller    `json:"started_by"`
	Started   time.Time `json:"started"`
	Ended     time.Time `json:"ended,omitzero"`
	// CPUSeconds is user and system time; MemBytes the resident set
	// while running, the peak resident set once ended.
	CPUSeconds float64 `json:"cpu_s"`
	MemBytes   uint64  `json:"mem_bytes"`
	// LogBytes is all the output the program wrote; LogDropped what the
	// bounded buffer no longer holds.
	LogBytes   uint64 `json:"log_bytes"`
	LogDropped uint64 `json:"log_dropped"`
	CPUs       string `json:"cpus,omitempty"`
	MemLimit   uint64 `json:"mem_limit,omitempty"`
	CPULimit   uint64 `json:"cpu_limit,omitempty"`
	// CPURate is the CPU bandwidth limit in CPUs (0.5: half of one).
	CPURate float64 `json:"cpu_rate,omitempty"`
	// Limits says how the limits were applied, for a program with any:
	// "cgroup v1" or "cgroup v2" (memory and CPU rate), "rlimit" (memory
	// without cgroups, CPU seconds always), or two of them joined by ", ".
	Limits string `json:"limits,omitempty"`
	// OOMKilled: the kernel's OOM killer killed a process of its cgroup
	// (the program over its memory limit, or a child of it).
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// Caller is who asked for a spawn: the asking domain, as its monitor
// knows it.
type Caller struct {
	Domain  uint64 `json:"domain"`
	PID     int32  `json:"pid"`
	UID     uint32 `json:"uid"`
	Program string `json:"program,omitempty"`
	// Machine is the caller's machine id (hex) when it asked from another
	// machine of the cluster: Domain, PID and UID are that machine's.
	Machine string `json:"machine,omitempty"`
}

// Procs lists the spawned processes, newest first.
func (c *Client) Procs(ctx context.Context) ([]Proc, error) {
	b, err := c.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	var out []Proc
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&out); err != nil {
		return nil, fmt.Errorf("list: decode: %w", err)
	}
	return out, nil
}

// ShipChunk is the size of the chunks Ship and Upload send: the most
// put_data carries, so that a chunk fits the interface's frames.
const ShipChunk = MaxPutDataDataLen

// Shipped is the outcome of Ship.
type Shipped struct {
	Hash string // the file's SHA-256, lowercase hex: Request.Hash
	Size int64
	// Uploaded is false when the target's cache held the file already:
	// nothing was sent, or what was sent before Ship knew the hash was
	// dropped.
	Uploaded bool
}

// HashFile returns the SHA-256 of the file at path, in lowercase hex, and
// its size.
func HashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("ship: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("ship: read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Ship makes sure the cache of the service's machine holds the file at
// path, and returns its hash: start it then with Request.Hash set to it.
// A file the cache holds is not uploaded (Shipped.Uploaded is false).
//
// The hash of a file this process has hashed before, and that has not
// changed since, is known (shipHashes): Ship asks whether the cache has
// it and uploads the file only if not, so that shipping one program to
// many machines hashes it once. Otherwise it hashes the file and sends
// it at the same time (put_open): once the hash is known it asks, and if
// the cache has the file it stops sending and drops the upload; if not,
// the upload goes on and put_close names the hash, which the service
// checks the bytes against.
func (c *Client) Ship(ctx context.Context, path string) (Shipped, error) {
	f, err := os.Open(path)
	if err != nil {
		return Shipped{}, fmt.Errorf("ship: %w", err)
	}
	defer f.Close()
	st, hash, size, known, err := shipHashes.lookup(f)
	if err != nil {
		return Shipped{}, fmt.Errorf("ship: %w", err)
	}
	if !known {
		sh, err := c.shipHashing(ctx, f, st)
		if err != nil {
			return sh, fmt.Errorf("ship %s: %w", path, err)
		}
		return sh, nil
	}
	out := Shipped{Hash: hash, Size: size}
	present, err := c.cached(ctx, hash)
	if err != nil {
		return out, fmt.Errorf("ship %s: %w", path, err)
	}
	if present {
		return out, nil
	}
	out.Uploaded, err = c.Upload(ctx, hash, size, f)
	if err != nil {
		return out, fmt.Errorf("ship %s: %w", path, err)
	}
	return out, nil
}

// cached says whether the service's cache holds the file whose hash is
// hash.
func (c *Client) cached(ctx context.Context, hash string) (bool, error) {
	present, _, code, err := c.Cached(ctx, hash)
	if err == nil {
		err = Error(code, "")
	}
	if err != nil {
		return false, fmt.Errorf("cached: %w", err)
	}
	return present, nil
}

// shipHashing is Ship of f, as st says it is, whose hash is not known: a
// goroutine hashes f while this one uploads it (put_open), each reading
// it at its own offsets (of a mapping of f where it maps: shipSource).
// Once the hash is known, between two chunks, the cache is asked for it;
// if it holds the file the upload is dropped.
func (c *Client) shipHashing(ctx context.Context, f *os.File, st *syscall.Stat_t) (Shipped, error) {
	size := st.Size
	id, code, detail, err := c.PutOpen(ctx, uint64(size))
	if err == nil {
		err = Error(code, string(detail))
	}
	if err != nil {
		return Shipped{}, fmt.Errorf("put_open: %w", err)
	}
	src := openShipSource(f, size)
	defer src.close() // deferred first, so run after the hashing ends
	type hashed struct {
		sum string
		err error
	}
	result := make(chan hashed, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop) // an early return ends the hashing at its next read
		wg.Wait()
	}()
	began := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		sum, err := src.hash(stop)
		result <- hashed{sum: sum, err: err}
	}()
	drop := func() { c.abandon(ctx, id) }
	out := Shipped{Size: size, Uploaded: true}
	// known takes the hash, and keeps it for a later Ship of f; an error
	// drops the upload.
	known := func(h hashed) error {
		if h.err != nil {
			drop()
			return h.err
		}
		out.Hash = h.sum
		shipHashes.remember(f, st, began, size, out.Hash)
		return nil
	}
	buf := make([]byte, ShipChunk)
	var off int64
	for off < size {
		// A send that finds room does not look at ctx: this does, so
		// that a canceled ship stops between two chunks.
		if err := ctx.Err(); err != nil {
			drop()
			return Shipped{}, fmt.Errorf("put_data at offset %d: %w", off, err)
		}
		if out.Hash == "" {
			var h hashed
			got := shipAwaitHash
			if got {
				h = <-result
			} else {
				select {
				case h = <-result:
					got = true
				default:
				}
			}
			if got {
				if err := known(h); err != nil {
					return Shipped{}, err
				}
				// If the cache holds the file, the rest need not go.
				present, err := c.cached(ctx, out.Hash)
				if err != nil || present {
					drop()
					out.Uploaded = false
					return out, err
				}
			}
		}
		n := int(min(int64(len(buf)), size-off))
		if err := src.readAt(buf[:n], off); err != nil {
			drop()
			return Shipped{}, fmt.Errorf("read at offset %d: %w", off, err)
		}
		if err := c.Send(ctx, &PutData{Upload: id, Offset: uint64(off), Data: buf[:n]}); err != nil {
			drop()
			return Shipped{}, fmt.Errorf("put_data at offset %d: %w", off, err)
		}
		off += int64(n)
		if shipAfterChunk != nil {
			shipAfterChunk(off)
		}
	}
	if out.Hash == "" {
		// Every byte has gone: the service's answer to put_close says
		// whether it held the file already, without asking first.
		var h hashed
		select {
		case h = <-result:
		case <-ctx.Done():
			drop()
			return Shipped{}, fmt.Errorf("waiting for the file's hash: %w", ctx.Err())
		}
		if err := known(h); err != nil {
			return Shipped{}, err
		}
	}
	present, code, detail, err := c.PutClose(ctx, id, out.Hash)
	if err == nil {
		err = Error(code, string(detail))
	}
	if err != nil {
		return out, fmt.Errorf("put_close: %w", err)
	}
	out.Uploaded = !present
	return out, nil
}

// abandonWait bounds how long an upload's abandon waits for the service.
const abandonWait = time.Second

// abandon gives upload id up (put_close without a hash), so that the
// service drops it and frees its room and its place in the domain's
// quota now rather than when it has been idle for its timeout. The call
// has a context of its own, as ctx's end may be why the upload is given
// up; an answer that does not come within abandonWait leaves the upload
// to the service's timeout, or to the connection's end.
func (c *Client) abandon(ctx context.Context, id uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonWait)
	defer cancel()
	c.PutClose(ctx, id, "")
}

// shipAwaitHash makes Ship wait for the hash before the first chunk of an
// upload, for tests of what it does when the cache holds the file.
var shipAwaitHash = false

// shipAfterChunk, if set, is called by Ship after each chunk it has sent,
// with the bytes sent so far: for tests of a file that changes meanwhile.
var shipAfterChunk func(sent int64)

// shipHashes is the hashes Ship has computed in this process.
var shipHashes = hashCache{max: 256}

// hashCache remembers files' SHA-256 by the file's identity (device and
// inode) and the size, modification and change times it had when hashed.
// Any write, chmod or replacement changes the change time, which no
// system call sets to a chosen value; but the kernel stamps times from a
// coarse clock, so a write within the same tick as the one before it may
// leave them as they were. A hash is therefore kept only for a file whose
// change time was at least racyWindow before the hashing began, as git
// does for its index: a later write then stamps a later time.
type hashCache struct {
	mu     sync.Mutex
	max    int
	m      map[fileID]hashedFile
	hashes int // files hashed, not found: for tests
}

type fileID struct{ dev, ino uint64 }

type hashedFile struct {
	size         int64
	mtime, ctime syscall.Timespec
	hash         string
}

// statOf returns what fstat(2) says of f.
func statOf(f *os.File) (*syscall.Stat_t, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("stat %s: no inode", f.Name())
	}
	return st, nil
}

// racyWindow is how long before a hash began a file must have last
// changed for its hash to be kept: far more than the clock's tick.
var racyWindow = time.Second

// lookup returns what fstat(2) says of f and, if f has not changed since
// it was hashed, its kept hash and size (known). Otherwise it counts f as
// hashed: its caller hashes it, and gives the hash to remember.
func (hc *hashCache) lookup(f *os.File) (st *syscall.Stat_t, hash string, size int64, known bool, err error) {
	if st, err = statOf(f); err != nil {
		return nil, "", 0, false, err
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if h, ok := hc.m[fileID{uint64(st.Dev), st.Ino}]; ok && h.size == st.Size && h.mtime == st.Mtim && h.ctime == st.Ctim {
		return st, h.hash, h.size, true, nil
	}
	hc.hashes++
	return st, "", 0, false, nil
}

// remember keeps hash, the SHA-256 of the n bytes of f read from its
// start after began, f being as st says before: if f is as it was and
// had not changed for racyWindow before began.
func (hc *hashCache) remember(f *os.File, st *syscall.Stat_t, began time.Time, n int64, hash string) {
	after, err := statOf(f)
	if err != nil {
		return
	}
	changed := time.Unix(st.Ctim.Unix())
	if after.Size != st.Size || after.Mtim != st.Mtim || after.Ctim != st.Ctim || n != st.Size || !changed.Before(began.Add(-racyWindow)) {
		return
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.m == nil || len(hc.m) >= hc.max {
		hc.m = make(map[fileID]hashedFile)
	}
	hc.m[fileID{uint64(st.Dev), st.Ino}] = hashedFile{size: st.Size, mtime: st.Mtim, ctime: st.Ctim, hash: hash}
}

// Upload sends the size bytes that r gives into the cache under hash,
// their SHA-256 (lowercase hex), in chunks of ShipChunk; it reports false
// when the cache held them already and nothing was sent. The service
// checks the bytes against hash: a mismatch is refused with ErrInvalid,
// and nothing enters the cache.
func (c *Client) Upload(ctx context.Context, hash string, size int64, r io.Reader) (bool, error) {
	id, present, code, detail, err := c.PutBegin(ctx, hash, uint64(size))
	if err == nil {
		err = Error(code, string(detail))
	}
	if err != nil {
		return false, fmt.Errorf("put_begin: %w", err)
	}
	if present {
		return false, nil
	}
	buf := make([]byte, ShipChunk)
	var off int64
	for off < size {
		if err := ctx.Err(); err != nil { // as in shipHashing
			c.abandon(ctx, id)
			return false, fmt.Errorf("put_data at offset %d: %w", off, err)
		}
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			c.abandon(ctx, id)
			return false, fmt.Errorf("read at offset %d: %w", off, err)
		}
		if err := c.Send(ctx, &PutData{Upload: id, Offset: uint64(off), Data: buf[:n]}); err != nil {
			c.abandon(ctx, id)
			return false, fmt.Errorf("put_data at offset %d: %w", off, err)
		}
		off += int64(n)
	}
	code, detail, err = c.PutEnd(ctx, id)
	if err == nil {
		err = Error(code, string(detail))
	}
	if err != nil {
		return false, fmt.Errorf("put_end: %w", err)
	}
	return true, nil
}

package bench

// The spawn suite's cases between two machines of a cluster
// (docs/spawn.md, "Figures"): remote spawn, end to end, against a local
// spawn plus one net round trip; and --ship of a 10 MB file against a raw
// TCP copy of it. The machines, their etcd and their monitors are built
// by the caller (SpawnConfig.Machines: cmd/chanos builds network
// namespaces as 'chanos demo --machines' does); the cases run in a
// driver process inside the second machine, this executable in the
// hidden mode "remote", and a TCP sink in the first, in the mode "sink".

import (
	"bufio"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	spawnif "github.com/chanos/chanos/interfaces/spawn"
)

// ShipBytes is the size of the file the ship cases send.
const ShipBytes = 10 << 20

// copiesPerShip is how many raw TCP copies of the file the suite times for
// each ship.
const copiesPerShip = 3

// SpawnMachines is two machines of a cluster for the spawn suite's
// remote cases: the cases run from machine 1 (the second) to machine 0.
type SpawnMachines struct {
	// Command returns a command that runs argv inside machine i, joined
	// to its monitor (CHANOS_DIR set).
	Command func(i int, argv ...string) *exec.Cmd
	// Addrs are the machines' addresses (no port).
	Addrs [2]string
}

// sinkPort is the port of the TCP sink on machine 0.
const sinkPort = "7171"

// runSpawnRemote runs the remote cases on m and emits their results.
func runSpawnRemote(ctx context.Context, cfg SpawnConfig, m *SpawnMachines, argv []string, n, ships int, emit func(Result) error) error {
	dir, err := os.MkdirTemp("", "chanos-bench-sink-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sinkAddr := net.JoinHostPort(m.Addrs[0], sinkPort)
	sink := m.Command(0, append(append([]string(nil), argv...), "sink", sinkAddr, dir)...)
	sink.Stderr = os.Stderr
	sinkOut, err := sink.StdoutPipe()
	if err != nil {
		return err
	}
	if err := sink.Start(); err != nil {
		return fmt.Errorf("the TCP sink: %w", err)
	}
	defer func() {
		sink.Process.Kill()
		sink.Wait()
	}()
	if l, err := bufio.NewReader(sinkOut).ReadString('\n'); err != nil || l != "ready\n" {
		return fmt.Errorf("the TCP sink: %q, %v", l, err)
	}
	self, err := json.Marshal(argv)
	if err != nil {
		return err
	}
	drv := m.Command(1, append(append([]string(nil), argv...), "remote", sinkAddr, strconv.Itoa(n), strconv.Itoa(ships),
		string(self))...)
	drv.Stderr = os.Stderr
	out, err := drv.StdoutPipe()
	if err != nil {
		return err
	}
	if err := drv.Start(); err != nil {
		return fmt.Errorf("the remote driver: %w", err)
	}
	sc := bufio.NewScanner(out)
	var emitErr error
	for sc.Scan() {
		line := sc.Bytes()
		if cfg.Progress != nil && !strings.HasPrefix(string(line), "{") {
			fmt.Fprintf(cfg.Progress, "%s\n", line)
			continue
		}
		var r Result
		if err := json.Unmarshal(line, &r); err != nil {
			continue
		}
		if emitErr == nil {
			emitErr = emit(r)
		}
	}
	if err := drv.Wait(); err != nil {
		return fmt.Errorf("the remote driver, in machine 2: %w", err)
	}
	return emitErr
}

// spawnSink receives files over TCP on addr, into dir: each connection
// sends an 8-byte length and the bytes, and gets one byte back once the
// file is written and closed. It prints "ready" once it listens.
func spawnSink(ctx context.Context, addr, dir string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println("ready")
	for i := 0; ; i++ {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		err = func() error {
			defer c.Close()
			var hdr [8]byte
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return err
			}
			f, err := os.Create(filepath.Join(dir, "copy"))
			if err != nil {
				return err
			}
			_, err = io.CopyN(f, c, int64(binary.LittleEndian.Uint64(hdr[:])))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			_, err = c.Write([]byte{1})
			return err
		}()
		if err != nil {
			return fmt.Errorf("sink: copy %d: %w", i, err)
		}
	}
}

// tcpCopy sends the file at path to the sink at addr and waits for its
// acknowledgement.
func tcpCopy(ctx context.Context, addr, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(fi.Size()))
	if _, err := c.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := io.Copy(c, f); err != nil {
		return err
	}
	var ack [1]byte
	_, err = io.ReadFull(c, ack[:])
	return err
}

// spawnRemoteDriver runs the remote cases from inside machine 1, joined
// to its monitor, against machine 0 (the other machine of the cluster),
// and prints each case's Result as a JSON line.
func spawnRemoteDriver(ctx context.Context, sinkAddr string, n, ships int, argv []string) error {
	d, err := chanos.Join(ctx, chanos.WithProgram("bench-spawn-remote"))
	if err != nil {
		return err
	}
	defer d.Close()
	list, err := d.Machines(ctx)
	if err != nil {
		return err
	}
	var target uint64
	for _, m := range list.Machines {
		if !m.Self {
			target, _ = strconv.ParseUint(m.ID, 16, 64)
			break
		}
	}
	if target == 0 {
		return errors.New("no other machine in the cluster")
	}
	const name = "bench.spawn.remote"
	l, err := pingpong.Export(ctx, d, name)
	if err != nil {
		return err
	}
	defer l.Close()
	srv := firstMessage{got: make(chan time.Time, 1)}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go pingpong.Serve(sctx, l, srv)
	remote, err := spawnif.DialMachine(ctx, d, target)
	if err != nil {
		return err
	}
	defer remote.Close()
	local, err := spawnif.Dial(ctx, d)
	if err != nil {
		return err
	}
	defer local.Close()

	spawnOn := func(c *spawnif.Conn) (time.Duration, error) { return spawnToFirst(ctx, c, srv, argv, name) }
	// A net round trip: an rpc that the other machine's monitor answers
	// at once, over the same connection the remote spawns use.
	var zero [32]byte
	zeroHash := fmt.Sprintf("%x", zero)
	roundTrip := func() (time.Duration, error) {
		t0 := time.Now()
		_, _, _, err := remote.Cached(ctx, zeroHash)
		return time.Since(t0), err
	}
	// Untimed first: the page cache, the first bind each way.
	if _, err := spawnOn(remote); err != nil {
		return fmt.Errorf("remote spawn: %w", err)
	}
	if _, err := spawnOn(local); err != nil {
		return fmt.Errorf("local spawn: %w", err)
	}
	var remoteS, localS, rtts []time.Duration
	for i := range n {
		if i%10 == 0 {
			fmt.Printf("spawn remote: %d/%d\n", i, n)
		}
		r, err := spawnOn(remote)
		if err != nil {
			return fmt.Errorf("remote spawn: %w", err)
		}
		l, err := spawnOn(local)
		if err != nil {
			return fmt.Errorf("local spawn: %w", err)
		}
		remoteS, localS = append(remoteS, r), append(localS, l)
		for range 5 {
			rt, err := roundTrip()
			if err != nil {
				return fmt.Errorf("net round trip: %w", err)
			}
			rtts = append(rtts, rt)
		}
	}

	// Ship: a fresh file each time (its last bytes random), so that the
	// cache never holds it; against a TCP copy of the same file.
	dir, err := os.MkdirTemp("", "chanos-bench-ship-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "payload")
	body := make([]byte, ShipBytes)
	rand.Read(body)
	var shipS, copyS, hashS, memS, sealS []time.Duration
	aead, err := newRecordAEAD()
	if err != nil {
		return err
	}
	sealed := make([]byte, 0, recordBytes+aead.Overhead())
	// The machine's busy CPU time during the ships and during the copies
	// (both machines, every process and the kernel's network work): what
	// each costs the two CPUs, for the least time a ship can take here.
	var shipBusy, copyBusy busyMeter
	for i := -1; i < ships; i++ {
		rand.Read(body[len(body)-32:])
		if err := os.WriteFile(path, body, 0o600); err != nil {
			return err
		}
		shipBusy.start()
		t0 := time.Now()
		sh, err := remote.Ship(ctx, path)
		ship := time.Since(t0)
		shipBusy.stop(i >= 0)
		if err != nil {
			return fmt.Errorf("ship: %w", err)
		}
		if !sh.Uploaded {
			return errors.New("ship: the target's cache held a fresh file")
		}
		// Three copies to a ship: the machine's counters move in 10-ms
		// ticks, and a copy takes about one.
		var cps []time.Duration
		for range copiesPerShip {
			copyBusy.start()
			t0 = time.Now()
			if err := tcpCopy(ctx, sinkAddr, path); err != nil {
				return fmt.Errorf("tcp copy: %w", err)
			}
			cps = append(cps, time.Since(t0))
			copyBusy.stop(i >= 0)
		}
		// The caller's hash of the file alone, which the ship overlaps
		// with the transfer; and the hash of the same bytes in memory,
		// as the target hashes the chunks it receives.
		t0 = time.Now()
		if _, _, err := spawnif.HashFile(path); err != nil {
			return err
		}
		hs := time.Since(t0)
		t0 = time.Now()
		sha256.Sum256(body)
		ms := time.Since(t0)
		// Encrypting the bytes as TLS does, in 16-KiB records; decrypting
		// them costs about as much.
		t0 = time.Now()
		sealRecords(aead, body, sealed)
		es := time.Since(t0)
		if i >= 0 { // the first of each is a warm-up
			shipS, hashS, memS = append(shipS, ship), append(hashS, hs), append(memS, ms)
			sealS = append(sealS, es)
			copyS = append(copyS, cps...)
		}
	}
	if err := errors.Join(shipBusy.err, copyBusy.err); err != nil {
		return err
	}

	enc := json.NewEncoder(os.Stdout)
	for _, c := range []struct {
		kase, transport string
		samples         []time.Duration
		size            int
	}{
		{"remote-spawn-to-first-message", "spawnd-net", remoteS, 0},
		{"local-spawn-to-first-message-m2", "spawnd", localS, 0},
		{"net-round-trip", "net", rtts, 0},
		{"ship-10MB", "spawnd-net", shipS, ShipBytes},
		{"tcp-copy-10MB", "tcp", copyS, ShipBytes},
		{"sha256-10MB", "none", hashS, ShipBytes},
		{"sha256-memory-10MB", "none", memS, ShipBytes},
		{"aes-gcm-10MB", "none", sealS, ShipBytes},
	} {
		r := spawnResult(c.kase, c.transport, c.samples)
		if c.size > 0 {
			r.Size = c.size
			bps := float64(c.size) / (*r.RTTp50 / 1e9)
			r.BytesPerS = &bps
		}
		switch c.kase {
		case "ship-10MB":
			r.CPUPercent = cpuPercent(shipBusy.busy, r.TotalNS)
		case "tcp-copy-10MB":
			r.CPUPercent = cpuPercent(copyBusy.busy, r.TotalNS)
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// spawnRemoteSummary prints the remote cases' ratios.
func spawnRemoteSummary(w io.Writer, results []Result) {
	by := map[string]*Result{}
	for i := range results {
		if results[i].RTTp50 != nil {
			by[results[i].Case] = &results[i]
		}
	}
	if s, c := by["ship-10MB"], by["tcp-copy-10MB"]; s != nil && c != nil {
		r := *s.RTTp50 / *c.RTTp50
		fmt.Fprintf(w, "--ship of 10 MB / raw TCP copy (p50: %.1f ms / %.1f ms): %.2f (goal <= 1.2: %s)\n",
			*s.RTTp50/1e6, *c.RTTp50/1e6, r, verdict(r <= 1.2))
		if h := by["sha256-10MB"]; h != nil {
			fmt.Fprintf(w, "  the caller's SHA-256 of the file alone, which the ship overlaps with the transfer: %.1f ms\n", *h.RTTp50/1e6)
		}
		shipLeast(w, s, c, by["sha256-memory-10MB"], by["aes-gcm-10MB"], runtime.NumCPU())
	}
	if rs, ls, rt := by["remote-spawn-to-first-message"], by["local-spawn-to-first-message-m2"], by["net-round-trip"]; rs != nil && ls != nil && rt != nil {
		base := *ls.RTTp50 + *rt.RTTp50
		fmt.Fprintf(w, "remote spawn, end to end / (local spawn + one net round trip) (p50: %.2f ms / (%.2f ms + %.3f ms)): %.2f (report)\n",
			*rs.RTTp50/1e6, *ls.RTTp50/1e6, *rt.RTTp50/1e6, *rs.RTTp50/base)
	}
}

// shipLeast prints what the machine's CPUs spent on a ship and on a copy,
// and from them the least time a ship can take on ncpu CPUs, all busy
// (the suite's two machines share this one's CPUs): the copy's work
// (reading the file, TCP both ways, writing the file) plus the target's
// SHA-256 of the bytes (hash, timed in memory); and plus what --ship adds
// to that: the caller's SHA-256 and AES-GCM both ways (seal, timed in
// memory, for the encryption and again for the decryption).
func shipLeast(w io.Writer, ship, cp, hash, seal *Result, ncpu int) {
	if ship.CPUPercent == nil || cp.CPUPercent == nil || hash == nil || seal == nil || ncpu < 1 {
		return
	}
	perOp := func(r *Result) float64 { // ms of busy CPU per op
		return *r.CPUPercent / 100 * float64(r.TotalNS) / float64(r.Iters) / 1e6
	}
	shipCPU, copyCPU := perOp(ship), perOp(cp)
	hashMS, sealMS, copyMS := *hash.RTTp50/1e6, *seal.RTTp50/1e6, *cp.RTTp50/1e6
	fmt.Fprintf(w, "  machine CPU: a ship %.1f ms (%.0f %% of one CPU over its time), a TCP copy %.1f ms (%.0f %%); in memory, SHA-256 of 10 MB %.1f ms, AES-GCM %.1f ms\n",
		shipCPU, *ship.CPUPercent, copyCPU, *cp.CPUPercent, hashMS, sealMS)
	checked := (copyCPU + hashMS) / float64(ncpu)
	full := (copyCPU + 2*hashMS + 2*sealMS) / float64(ncpu)
	fmt.Fprintf(w, "  least a ship takes on %d CPUs, none idle: the copy's work and the target's hash %.1f ms = %.2f x the copy; with the caller's hash and AES-GCM both ways %.1f ms = %.2f x\n",
		ncpu, checked, checked/copyMS, full, full/copyMS)
}

// recordBytes is the plaintext of a TLS record at most.
const recordBytes = 16 << 10

// newRecordAEAD returns AES-128-GCM under a fixed key: the cipher that
// Go's TLS 1.3, and so the net interconnect between Go domains, picks on
// a machine with AES instructions.
func newRecordAEAD() (cipher.AEAD, error) {
	block, err := aes.NewCipher(make([]byte, 16))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealRecords encrypts b in records as TLS does, into buf (reused).
func sealRecords(aead cipher.AEAD, b, buf []byte) {
	var nonce [12]byte
	for i := 0; len(b) > 0; i++ {
		n := min(len(b), recordBytes)
		binary.BigEndian.PutUint64(nonce[4:], uint64(i))
		aead.Seal(buf[:0], nonce[:], b[:n], nil)
		b = b[n:]
	}
}

package spawn

// The cache of shipped programs (docs/spawn.md, "Shipping a program"):
// files named by the SHA-256 of their bytes, in a directory of the
// monitor's (0700), filled by uploads that the service checks against
// their hash before they enter it, and checked again before a file runs.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	api "github.com/chanos/chanos/interfaces/spawn"
)

// Defaults of Config's cache limits.
const (
	DefaultCacheBytes          = 1 << 30
	DefaultMaxShipBytes        = 256 << 20
	DefaultMaxUploads          = 8
	DefaultMaxUploadsPerDomain = 2
	DefaultUploadIdle          = 30 * time.Second
)

// tempPrefix begins the names of the files of uploads in progress; the
// cache's own files are named by their hash alone.
const tempPrefix = ".up-"

// ErrNoCache is the error of the cache's calls on a service configured
// without a cache directory; it matches api.ErrUnavailable.
var ErrNoCache = fmt.Errorf("%w: this monitor keeps no cache of shipped programs", api.ErrUnavailable)

// cache is the content-addressed store of shipped programs.
type cache struct {
	dir string // resolved, absolute
	cfg *Config
	log *slog.Logger

	mu       sync.Mutex
	files    map[string]*entry // by hash
	used     int64             // bytes of the files
	reserved int64             // bytes reserved by the uploads in progress
	uploads  map[uint64]*upload
	byDom    map[Caller]int // uploads in progress by domain (Domain and Machine)
	nextID   uint64
	closed   bool
}

// entry is a file of the cache.
type entry struct {
	size int64
	used time.Time // last put or spawn: the least recently used goes first
	// stamp is the file's identity and times when its bytes were last
	// hashed and matched; zero until then (a file found at start).
	stamp stamp
}

// stamp identifies a file's contents without reading them: any write,
// chmod or replacement changes the inode or its change time.
type stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

func stampOf(fi os.FileInfo) stamp {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{}
	}
	return stamp{dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// UploadQueue is how many chunks of an upload wait for its writer at
// most: the reading of the connection goes on while the writer hashes
// and writes the chunks before them, and stops when this many wait.
const UploadQueue = 8

// UploadBufferBytes bounds the memory of one upload's chunks: those
// queued, the one the writer holds and the one being copied.
const UploadBufferBytes = (UploadQueue + 2) * api.MaxPutDataDataLen

// upload is an upload in progress. The connection's reading goroutine
// checks each chunk and queues a copy (put); the upload's writer
// goroutine hashes the chunks and writes them to the upload's file, so
// that receiving, hashing and writing overlap.
type upload struct {
	id    uint64
	hash  string
	size  int64
	owner uint64 // the connection that began it: only it may add to it
	dom   Caller
	temp  string

	mu     sync.Mutex
	timer  *time.Timer // ends it when idle
	queued int64       // the bytes put has accepted
	err    error       // the first fault; the upload then takes no more bytes
	last   time.Time
	done   bool // no more bytes: ended, failed or dropped; work is closed
	keep   bool // put_end ends it: the writer leaves the file to it

	work    chan []byte   // to the writer
	free    chan []byte   // the writer's spent buffers
	drained chan struct{} // closed by the writer once it has written all it was given

	// The writer's; read by others only once drained is closed.
	f    *os.File
	h    hash.Hash
	got  int64
	werr error
}

// writer hashes and writes u's chunks until work is closed. Unless
// put_end is to keep the file, it then removes it.
func (u *upload) writer() {
	for b := range u.work {
		if u.werr == nil {
			if _, err := u.f.Write(b); err != nil {
				u.werr = fmt.Errorf("%w: write the upload's file: %v", api.ErrFailed, err)
			} else {
				u.h.Write(b)
				u.got += int64(len(b))
			}
		}
		select {
		case u.free <- b[:cap(b)]:
		default:
		}
	}
	u.mu.Lock()
	keep := u.keep
	u.mu.Unlock()
	if !keep {
		u.f.Close()
		os.Remove(u.temp)
	}
	close(u.drained)
}

// stopLocked takes no more bytes for u.
func (u *upload) stopLocked() {
	if !u.done {
		u.done = true
		close(u.work)
	}
}

// ValidHash reports whether h is a SHA-256 as the cache names files: 64
// lowercase hex digits.
func ValidHash(h string) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	for i := range len(h) {
		c := h[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func checkHash(h string) error {
	if !ValidHash(h) {
		return fmt.Errorf("%w: %q is not a SHA-256 in lowercase hex", api.ErrInvalid, h)
	}
	return nil
}

// openCache opens the cache in dir, making it (0700) if need be: it
// removes the files of uploads a previous run left, and takes the others
// named by a hash as unchecked files, to be hashed before they first run.
func openCache(dir string, cfg *Config) (*cache, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("spawn: cache directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("spawn: cache directory: %w", err)
	}
	// Lstat: the cache itself may not be a link to somewhere else.
	fi, err := os.Lstat(abs)
	if err != nil {
		return nil, fmt.Errorf("spawn: cache directory: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || st == nil || int(st.Uid) != os.Getuid() {
		return nil, fmt.Errorf("spawn: cache directory %s: not a directory owned by this uid", abs)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(abs, 0o700); err != nil {
			return nil, fmt.Errorf("spawn: cache directory: %w", err)
		}
	}
	c := &cache{dir: abs, cfg: cfg, log: cfg.Logger, files: map[string]*entry{}, uploads: map[uint64]*upload{}, byDom: map[Caller]int{}}
	des, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("spawn: cache directory: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		path := filepath.Join(abs, name)
		switch {
		case strings.HasPrefix(name, tempPrefix):
			os.Remove(path)
		case ValidHash(name) && de.Type().IsRegular():
			fi, err := de.Info()
			if err != nil {
				continue
			}
			c.files[name] = &entry{size: fi.Size(), used: fi.ModTime()}
			c.used += fi.Size()
		}
	}
	c.mu.Lock()
	c.evictLocked(0)
	c.mu.Unlock()
	return c, nil
}

// path is the file of hash in the cache.
func (c *cache) path(hash string) string { return filepath.Join(c.dir, hash) }

// evictLocked removes the least recently used files until n more bytes
// fit in the cache's size; it reports whether they do. A program that
// runs from a removed file runs on: the kernel keeps the file while it
// is mapped.
func (c *cache) evictLocked(n int64) bool {
	if c.reserved+n > c.cfg.CacheBytes {
		return false // no eviction would make room: keep the files
	}
	for c.used+c.reserved+n > c.cfg.CacheBytes {
		var (
			oldest string
			e      *entry
		)
		for h, f := range c.files {
			if e == nil || f.used.Before(e.used) {
				oldest, e = h, f
			}
		}
		if e == nil {
			return false
		}
		c.dropLocked(oldest, "evicted, least recently used")
	}
	return true
}

// dropLocked forgets hash's file and removes it.
func (c *cache) dropLocked(hash, why string) {
	e := c.files[hash]
	if e == nil {
		return
	}
	delete(c.files, hash)
	c.used -= e.size
	if err := os.Remove(c.path(hash)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Warn("spawn cache: remove a file", "hash", hash, "err", err)
	}
	c.log.Info("spawn cache: file removed", "hash", hash, "size", e.size, "why", why)
}

// cached reports whether the cache holds hash, and its size.
func (c *cache) cached(hash string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.files[hash]; e != nil {
		return e.size, true
	}
	return 0, false
}

// begin starts an upload of size bytes whose hash is hash (checked by
// the caller), for owner (a connection) of domain who. It returns
// present when the cache holds the file already. An upload without a
// hash ("", put_open) learns it at its end.
func (c *cache) begin(hash string, size int64, owner uint64, who Caller) (uint64, bool, error) {
	if size <= 0 {
		return 0, false, fmt.Errorf("%w: size %d", api.ErrInvalid, size)
	}
	if size > c.cfg.MaxShipBytes {
		return 0, false, fmt.Errorf("%w: a %d-byte program is larger than the largest the cache takes, %d bytes (--spawn-ship-max)",
			api.ErrExhausted, size, c.cfg.MaxShipBytes)
	}
	dom := domainOf(who)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return 0, false, fmt.Errorf("%w: the monitor is shutting down", api.ErrUnavailable)
	case hash != "" && c.files[hash] != nil:
		c.files[hash].used = time.Now()
		return 0, true, nil
	case len(c.uploads) >= c.cfg.MaxUploads:
		return 0, false, fmt.Errorf("%w: %d uploads are in progress, the monitor's quota", api.ErrExhausted, len(c.uploads))
	case c.byDom[dom] >= c.cfg.MaxUploadsPerDomain:
		return 0, false, fmt.Errorf("%w: domain %d has %d uploads in progress, its quota", api.ErrExhausted, who.Domain, c.byDom[dom])
	}
	if !c.evictLocked(size) {
		return 0, false, fmt.Errorf("%w: the cache cannot hold %d more bytes: %d bytes are reserved by uploads in progress, of %d (--spawn-cache-size)",
			api.ErrExhausted, size, c.reserved, c.cfg.CacheBytes)
	}
	c.nextID++
	u := &upload{id: c.nextID, hash: hash, size: size, owner: owner, dom: dom, h: sha256.New(), last: time.Now(),
		work: make(chan []byte, UploadQueue), free: make(chan []byte, UploadQueue+1), drained: make(chan struct{})}
	u.temp = filepath.Join(c.dir, tempPrefix+strconv.FormatUint(u.id, 10))
	f, err := os.OpenFile(u.temp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, false, fmt.Errorf("%w: the upload's file: %v", api.ErrFailed, err)
	}
	u.f = f
	go u.writer()
	c.uploads[u.id] = u
	c.byDom[dom]++
	c.reserved += size
	u.mu.Lock()
	u.timer = time.AfterFunc(c.cfg.UploadIdle, func() { c.idle(u) })
	u.mu.Unlock()
	return u.id, false, nil
}

// get returns owner's upload id.
func (c *cache) get(id, owner uint64) (*upload, error) {
	c.mu.Lock()
	u := c.uploads[id]
	c.mu.Unlock()
	if u == nil || u.owner != owner {
		return nil, fmt.Errorf("%w: upload %d (none in progress on this connection)", api.ErrNotFound, id)
	}
	return u, nil
}

// put adds data at offset to owner's upload id: it checks the chunk and
// queues a copy for the upload's writer, waiting while UploadQueue
// chunks wait. A fault fails the upload: it takes no more bytes, its
// file goes, and end reports it.
func (c *cache) put(id, owner, offset uint64, data []byte) error {
	u, err := c.get(id, owner)
	if err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.done:
		if u.err == nil {
			return fmt.Errorf("%w: upload %d has ended", api.ErrNotFound, id)
		}
		return u.err
	case offset != uint64(u.queued):
		u.failLocked(fmt.Errorf("%w: a chunk at offset %d, where %d was next", api.ErrInvalid, offset, u.queued))
		return u.err
	case int64(len(data)) > u.size-u.queued:
		u.failLocked(fmt.Errorf("%w: %d bytes at offset %d pass the upload's size, %d", api.ErrInvalid, len(data), offset, u.size))
		return u.err
	case len(data) == 0:
		return nil
	}
	var b []byte
	select {
	case b = <-u.free:
	default:
		b = make([]byte, max(len(data), api.MaxPutDataDataLen))
	}
	b = append(b[:0], data...)
	u.queued += int64(len(b))
	u.last = time.Now()
	// Under u.mu, so that no close of work comes between; the writer
	// takes no lock until work is closed.
	u.work <- b
	return nil
}

// failLocked records u's first fault and stops it; its writer then
// removes its file, so that a peer that sends garbage holds no disk
// space for it.
func (u *upload) failLocked(err error) {
	if u.err == nil {
		u.err = err
	}
	u.stopLocked()
}

// finish forgets u and releases what it reserved.
func (c *cache) finish(u *upload) {
	u.mu.Lock()
	u.timer.Stop()
	u.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.uploads[u.id] != u {
		return
	}
	delete(c.uploads, u.id)
	c.reserved -= u.size
	if c.byDom[u.dom]--; c.byDom[u.dom] <= 0 {
		delete(c.byDom, u.dom)
	}
}

// errGivenUp ends an upload whose caller closed it without a hash.
var errGivenUp = errors.New("given up by its caller")

// end ends owner's upload id: its file enters the cache once all its
// bytes have come and their SHA-256 is its hash. An upload begun with
// its hash is ended by put_end; one begun without it, by put_close
// (closing), which names hash. The other way round fails the upload.
// A put_close with no hash drops either kind (errGivenUp).
func (c *cache) end(id, owner uint64, closing bool, hash string) (present bool, err error) {
	u, err := c.get(id, owner)
	if err != nil {
		return false, err
	}
	defer c.finish(u)
	u.mu.Lock()
	if !u.done {
		switch {
		case !closing && u.hash == "":
			u.failLocked(fmt.Errorf("%w: upload %d was opened without its hash: put_close ends it, naming the hash", api.ErrInvalid, id))
		case closing && hash == "":
			u.failLocked(errGivenUp) // either kind
		case closing && u.hash != "":
			u.failLocked(fmt.Errorf("%w: upload %d began with its hash: put_end ends it", api.ErrInvalid, id))
		case closing:
			if err := checkHash(hash); err != nil {
				u.failLocked(err)
			} else {
				u.hash = hash // read by others only once done
			}
		}
	}
	if u.done {
		err := u.err
		u.mu.Unlock()
		<-u.drained
		if err == nil {
			err = fmt.Errorf("%w: upload %d has ended", api.ErrNotFound, id)
		}
		return false, err
	}
	u.keep = true
	u.stopLocked()
	u.mu.Unlock()
	<-u.drained
	// The file is put_end's now.
	present, err = u.commit(c)
	if err != nil {
		u.f.Close()
		os.Remove(u.temp)
		return false, err
	}
	return present, nil
}

// commit moves u's file into the cache, once drained, if it is whole and
// its bytes' SHA-256 is u's hash; present if the cache held it already.
func (u *upload) commit(c *cache) (present bool, err error) {
	switch {
	case u.werr != nil:
		return false, u.werr
	case u.got != u.size:
		return false, fmt.Errorf("%w: upload %d ended after %d of its %d bytes", api.ErrInvalid, u.id, u.got, u.size)
	}
	if sum := hex.EncodeToString(u.h.Sum(nil)); sum != u.hash {
		return false, fmt.Errorf("%w: the bytes uploaded have the SHA-256 %s, not %s", api.ErrInvalid, sum, u.hash)
	}
	// Read and execute for the owner only, and never written again.
	if err := u.f.Chmod(0o500); err != nil {
		return false, fmt.Errorf("%w: chmod the upload's file: %v", api.ErrFailed, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.files[u.hash]; e != nil {
		// Another upload of the same file ended first. Its file stays: a
		// spawn may be about to run it, checked for writers, and this
		// one's inode may still be open for writing in a child forked
		// meanwhile.
		e.used = time.Now()
		u.f.Close()
		os.Remove(u.temp)
		return true, nil
	}
	if err := os.Rename(u.temp, c.path(u.hash)); err != nil {
		return false, fmt.Errorf("%w: rename the upload's file into the cache: %v", api.ErrFailed, err)
	}
	// The stamp of the file as it stays: after the rename, which changes
	// its change time, and from the descriptor, so of the bytes hashed.
	// Without one (stamp{}), its first spawn hashes it again.
	var st stamp
	if fi, err := u.f.Stat(); err == nil {
		st = stampOf(fi)
	}
	if err := u.f.Close(); err != nil {
		os.Remove(c.path(u.hash))
		return false, fmt.Errorf("%w: close the upload's file: %v", api.ErrFailed, err)
	}
	c.files[u.hash] = &entry{size: u.size, used: time.Now(), stamp: st}
	c.used += u.size
	return false, nil
}

// idle ends u if no bytes came for Config.UploadIdle: a peer that stops
// halfway holds its reservation no longer than that.
func (c *cache) idle(u *upload) {
	u.mu.Lock()
	if u.done {
		u.mu.Unlock()
		return
	}
	if left := c.cfg.UploadIdle - time.Since(u.last); left > 0 {
		u.timer.Reset(left)
		u.mu.Unlock()
		return
	}
	u.stopLocked()
	u.mu.Unlock()
	<-u.drained
	c.log.Warn("spawn cache: upload dropped, idle", "upload", u.id, "hash", u.hash, "got", u.got, "size", u.size,
		"domain", u.dom.Domain, "from_machine", u.dom.Machine)
	c.finish(u)
}

// abort ends the uploads of owner (a connection that has ended), or all
// of them for owner 0.
func (c *cache) abort(owner uint64) {
	c.mu.Lock()
	var us []*upload
	for _, u := range c.uploads {
		if owner == 0 || u.owner == owner {
			us = append(us, u)
		}
	}
	c.mu.Unlock()
	for _, u := range us {
		u.mu.Lock()
		was := u.done
		u.stopLocked()
		u.mu.Unlock()
		<-u.drained
		if !was {
			c.log.Info("spawn cache: upload dropped, its connection ended", "upload", u.id, "hash", u.hash, "got", u.got, "size", u.size)
		}
		c.finish(u)
	}
}

// close drops every upload in progress and takes no more.
func (c *cache) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.abort(0)
}

// verified returns the path of hash's file once its bytes match hash:
// hashed now unless the file is as it was when last hashed. A file that
// does not match is removed.
func (c *cache) verified(hash string) (string, error) {
	if err := checkHash(hash); err != nil {
		return "", err
	}
	c.mu.Lock()
	e := c.files[hash]
	var known stamp
	if e != nil {
		known = e.stamp
		e.used = time.Now()
	}
	c.mu.Unlock()
	if e == nil {
		return "", fmt.Errorf("%w: no program with SHA-256 %s in the cache (ship it first)", api.ErrNotFound, hash)
	}
	path := c.path(hash)
	f, err := os.Open(path)
	if err != nil {
		c.mu.Lock()
		c.dropLocked(hash, "cannot be opened")
		c.mu.Unlock()
		return "", fmt.Errorf("%w: the cached program %s: %v", api.ErrNotFound, hash, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: %v", api.ErrFailed, err)
	}
	now := stampOf(fi)
	if now == known && known != (stamp{}) {
		return path, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%w: read the cached program %s: %v", api.ErrFailed, hash, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != hash {
		c.mu.Lock()
		c.dropLocked(hash, "its bytes do not match its hash")
		c.mu.Unlock()
		return "", fmt.Errorf("%w: the cached file of %s has changed (its SHA-256 is now %s); it is removed, ship it again", api.ErrFailed, hash, sum)
	}
	c.mu.Lock()
	if e := c.files[hash]; e != nil {
		e.stamp = now
	}
	c.mu.Unlock()
	return path, nil
}

// CacheStats is the state of the cache.
type CacheStats struct {
	Files    int   `json:"files"`
	Bytes    int64 `json:"bytes"`
	Reserved int64 `json:"reserved"`
	Uploads  int   `json:"uploads"`
}

func (c *cache) stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Files: len(c.files), Bytes: c.used, Reserved: c.reserved, Uploads: len(c.uploads)}
}

// shipAllowed checks the policy for shipped programs: with allowed
// directories, only if the cache is one of them or below one.
func (s *Service) shipAllowed() error {
	if s.cache == nil {
		return ErrNoCache
	}
	if len(s.allow) == 0 {
		return nil
	}
	dir, err := filepath.EvalSymlinks(s.cache.dir)
	if err != nil {
		return fmt.Errorf("%w: %v", api.ErrFailed, err)
	}
	for _, d := range s.allow {
		if rel, err := filepath.Rel(d, dir); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return nil
		}
	}
	return fmt.Errorf("%w: shipped programs run from the cache %s, outside the allowed directories %v", api.ErrDenied, dir, s.cfg.Allow)
}

// Cached reports whether the cache of shipped programs holds the file
// whose SHA-256 is hash (lowercase hex), and its size.
func (s *Service) Cached(hash string) (int64, bool, error) {
	if s.cache == nil {
		return 0, false, ErrNoCache
	}
	if err := checkHash(hash); err != nil {
		return 0, false, err
	}
	size, ok := s.cache.cached(hash)
	return size, ok, nil
}

// PutBegin starts an upload into the cache of size bytes whose SHA-256 is
// hash, for the connection owner of domain who; present reports that the
// cache holds the file already, and no upload is started. Only owner may
// add to the upload (PutData) and end it (PutEnd); AbortUploads drops
// it when owner ends.
func (s *Service) PutBegin(hash string, size uint64, owner uint64, who Caller) (id uint64, present bool, err error) {
	return s.putBegin("spawn.put_begin", true, hash, size, owner, who)
}

// PutOpen starts an upload into the cache of size bytes whose SHA-256 the
// caller names only when it ends it (PutClose), for the connection owner
// of domain who, with PutBegin's quotas and policy.
func (s *Service) PutOpen(size uint64, owner uint64, who Caller) (id uint64, err error) {
	id, _, err = s.putBegin("spawn.put_open", false, "", size, owner, who)
	return id, err
}

// putBegin is PutBegin (named: hash names the file) and PutOpen, as call.
func (s *Service) putBegin(call string, named bool, hash string, size uint64, owner uint64, who Caller) (id uint64, present bool, err error) {
	if err := s.shipAllowed(); err != nil {
		return 0, false, err
	}
	if size > uint64(s.cfg.MaxShipBytes) {
		size = uint64(s.cfg.MaxShipBytes) + 1 // refused by begin, without overflow
	}
	if named {
		// "" would open an upload without a hash.
		err = checkHash(hash)
	}
	if err == nil {
		id, present, err = s.cache.begin(hash, int64(size), owner, who)
	}
	log := s.log.With("call", call, "size", size, "domain", who.Domain, "pid", who.PID, "by", who.Program)
	if named {
		log = log.With("hash", hash)
	}
	if who.Machine != "" {
		log = log.With("from_machine", who.Machine)
	}
	switch {
	case err != nil:
		s.refused(log, call, "upload refused", err)
	case present:
		log.Debug("upload not needed: cached")
	default:
		log.Info("upload begun", "upload", id)
	}
	return id, present, err
}

// PutData adds data at offset to owner's upload id. A chunk out of
// place, or past the upload's size, fails the upload: the error is
// returned here and again by PutEnd.
func (s *Service) PutData(id, owner, offset uint64, data []byte) error {
	if s.cache == nil {
		return ErrNoCache
	}
	return s.cache.put(id, owner, offset, data)
}

// PutEnd ends owner's upload id. Its file enters the cache if all its
// bytes came and their SHA-256 is the upload's hash; otherwise it is
// dropped, and the error says why (ErrInvalid).
func (s *Service) PutEnd(id, owner uint64) error {
	_, err := s.putEnd("spawn.put_end", id, owner, false, "")
	return err
}

// PutClose ends owner's upload id, which PutOpen began, naming its
// SHA-256: as PutEnd, with hash as the upload's. present reports that the
// cache held the file already, and keeps that copy. With hash "" the
// caller gives the upload up, one that PutBegin began too: it is
// dropped, and that is no error.
func (s *Service) PutClose(id, owner uint64, hash string) (present bool, err error) {
	return s.putEnd("spawn.put_close", id, owner, true, hash)
}

// putEnd is PutEnd and PutClose (closing), as call.
func (s *Service) putEnd(call string, id, owner uint64, closing bool, hash string) (bool, error) {
	if s.cache == nil {
		return false, ErrNoCache
	}
	present, err := s.cache.end(id, owner, closing, hash)
	if errors.Is(err, errGivenUp) {
		s.log.Debug("upload dropped: given up by its caller", "call", call, "upload", id)
		return false, nil
	}
	if err != nil {
		s.refused(s.log.With("call", call, "upload", id), call, "upload refused", err)
	} else {
		log := s.log.With("call", call, "upload", id)
		if closing {
			log = log.With("hash", hash)
		}
		log.Info("upload ended: in the cache", "present", present)
	}
	return present, err
}

// AbortUploads drops the uploads in progress of the connection owner.
func (s *Service) AbortUploads(owner uint64) {
	if s.cache != nil && owner != 0 {
		s.cache.abort(owner)
	}
}

// CacheStats returns the state of the cache of shipped programs.
func (s *Service) CacheStats() CacheStats {
	if s.cache == nil {
		return CacheStats{}
	}
	return s.cache.stats()
}

// CacheDir returns the cache's directory, resolved ("" for none).
func (s *Service) CacheDir() string {
	if s.cache == nil {
		return ""
	}
	return s.cache.dir
}

// SpawnShipped starts the cached file whose SHA-256 is hash, as Spawn
// starts r.Program: r.Program is its argv[0]. The file's bytes are
// checked against hash before it runs.
func (s *Service) SpawnShipped(hash string, r Request, who Caller) (api.Started, error) {
	log := s.log.With("call", "spawn.spawn_shipped", "domain", who.Domain, "pid", who.PID, "uid", who.UID, "by", who.Program,
		"hash", hash, "program", r.Program, "args", r.Args)
	if who.Machine != "" {
		log = log.With("from_machine", who.Machine)
	}
	st, err := s.spawnShipped(hash, r, who)
	if err != nil {
		s.refused(log, "spawn.spawn_shipped", "spawn refused", err)
		return st, err
	}
	log.Info("spawned", "id", st.ID, "child_pid", st.PID, "cpus", r.CPUs, "mem_limit", r.Mem, "cpu_limit", r.CPU, "cpu_rate_milli", r.CPURate)
	return st, nil
}

func (s *Service) spawnShipped(hash string, r Request, who Caller) (api.Started, error) {
	if err := s.shipAllowed(); err != nil {
		return api.Started{}, err
	}
	path, err := s.cache.verified(hash)
	if err != nil {
		return api.Started{}, err
	}
	if r.Program == "" {
		r.Program = hash
	}
	return s.spawn(r, who, path)
}

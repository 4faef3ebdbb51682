package ump

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"syscall"
	"time"
)

// Files are the descriptors of one ring pair: the sealed memfd holding both
// rings, and two pairs of connected Unix stream sockets that wake a side
// that sleeps. Wake[s] are side s's ends: Wake[s][wakeData] wakes it when
// its incoming ring has data (and it signals on it when it has written its
// outgoing ring), Wake[s][wakeSpace] wakes it when its outgoing ring has
// space (and it signals on it when it has consumed its incoming ring).
// Ring 0 is written by the Creator side. A side is given only its own ends:
// its wake-ups are then its own, and no flag the peer sets on its ends can
// change how they behave (docs/ump.md, "Wake-up sockets").
//
// Caps[s] is side s's end of the caps socket, a Unix seqpacket pair on
// which descriptors sent in messages travel (docs/ump.md, "Descriptors").
//
// Whoever holds a Files owns its descriptors: pass it to Open, which takes
// them over, or call Close. A descriptor of -1 is absent.
type Files struct {
	Mem  int
	Wake [2][2]int
	Caps [2]int

	size int // the memfd's size, as NewFiles made it; 0 if not made here
}

// The two wake-up sockets of a side, indexes of Files.Wake[side].
const (
	wakeData  = 0
	wakeSpace = 1
)

func noFiles() *Files {
	return &Files{Mem: -1, Wake: [2][2]int{{-1, -1}, {-1, -1}}, Caps: [2]int{-1, -1}}
}

// NewFiles creates the shared memory and wake-up sockets of a ring pair
// configured by o, with the header written and the memfd sealed against
// resizing. The monitor (or Create) hands each side its part.
func NewFiles(o *Options) (*Files, error) {
	cfg, err := newConfig(o)
	if err != nil {
		return nil, err
	}
	f := noFiles()
	if f.Mem, err = memfdCreate("chanos-ump"); err != nil {
		return nil, err
	}
	fail := func(err error) (*Files, error) {
		f.Close()
		return nil, err
	}
	size := cfg.totalSize()
	if err := syscall.Ftruncate(f.Mem, int64(size)); err != nil {
		return fail(os.NewSyscallError("ftruncate", err))
	}
	if _, err := fcntl(f.Mem, fAddSeals, sealShrink|sealGrow|sealSeal); err != nil {
		return fail(os.NewSyscallError("fcntl(F_ADD_SEALS)", err))
	}
	// Written, not mapped: unmapping a page of a process with threads on
	// other CPUs costs an interrupt to each (a TLB shootdown).
	var hdr [headerFields]byte
	cfg.writeHeader(hdr[:])
	if n, err := syscall.Pwrite(f.Mem, hdr[:], 0); err != nil || n != len(hdr) {
		return fail(os.NewSyscallError("pwrite", cmp.Or(err, error(syscall.EIO))))
	}
	for kind := range 2 {
		pair, err := wakeSocketPair()
		if err != nil {
			return fail(err)
		}
		f.Wake[Creator][kind], f.Wake[Attacher][kind] = pair[0], pair[1]
	}
	if f.Caps, err = capsSocketPair(); err != nil {
		return fail(err)
	}
	f.size = size
	return f, nil
}

// Close closes the descriptors that are still open.
func (f *Files) Close() error {
	closeFDs(f.Mem)
	for s := range f.Wake {
		closeFDs(f.Wake[s][:]...)
	}
	closeFDs(f.Caps[:]...)
	*f = *noFiles()
	return nil
}

// take returns side's part of f, which f gives up, and leaves the rest
// (the other side's wake-up sockets) in f. The memfd is duplicated: both
// sides map it.
func (f *Files) take(side Side) (*Files, error) {
	mem, err := dupFD(f.Mem)
	if err != nil {
		return nil, err
	}
	g := noFiles()
	g.Mem, g.Wake[side], g.Caps[side] = mem, f.Wake[side], f.Caps[side]
	f.Wake[side], f.Caps[side] = [2]int{-1, -1}, -1
	return g, nil
}

// Open maps a ring pair and returns side's connection. It takes ownership
// of the descriptors in f and of sock, a connected Unix socket to the peer
// that is kept open for the life of the connection: its end of file tells
// that the peer closed or died. Both are closed if Open fails.
//
// Open checks everything it is given, as the descriptors may come from an
// untrusted peer: the memfd must be sealed against shrinking, its header
// valid and consistent with its size, the wake-up descriptors side's Unix
// stream sockets.
func Open(side Side, f *Files, sock *net.UnixConn, o *Options) (*Conn, error) {
	c, err := open(side, f, sock, o, false)
	if err != nil {
		sock.Close()
		return nil, err
	}
	c.start()
	return c, nil
}

// open is Open without closing sock on failure and without starting the
// socket watcher (the handshake still uses the socket); it always takes f.
// made says that this process made f with NewFiles and nobody else has
// held it: its descriptors are what they claim to be, and are not checked
// (a system call each, of the dozen or so of a setup; the header still
// is), and its size is the one NewFiles gave it.
func open(side Side, f *Files, sock *net.UnixConn, o *Options, made bool) (*Conn, error) {
	defer f.Close()
	if side != Creator && side != Attacher {
		return nil, fmt.Errorf("ump: bad side %d", side)
	}
	size, err := f.size, error(nil)
	if !made {
		size, err = checkFiles(side, f, sock)
	} else if size <= 0 {
		err = errors.New("ump: open: files not made by NewFiles")
	}
	if err != nil {
		return nil, err
	}
	mem, err := syscall.Mmap(f.Mem, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	cfg, err := readHeader(mem, size)
	if err == nil && o != nil && o.MaxMessageSize != 0 && int(cfg.maxMsg) > o.MaxMessageSize {
		err = fmt.Errorf("ump: the ring pair's maximum message size %d exceeds ours, %d", cfg.maxMsg, o.MaxMessageSize)
	}
	if err != nil {
		syscall.Munmap(mem)
		return nil, err
	}

	s, peer := int(side), 1-int(side)
	ring := func(r int) []byte {
		off := cfg.ringOffset(r)
		return mem[off : off+int(cfg.slots)*SlotSize : off+int(cfg.slots)*SlotSize]
	}
	ctl := func(r, off int) *uint64 { return word(mem, offRing0+r*ringCtlSize+off) }
	bulk := func(r int) []byte {
		if cfg.bulk == 0 {
			return nil
		}
		off := cfg.bulkOffset(r)
		return mem[off : off+int(cfg.bulk) : off+int(cfg.bulk)]
	}
	n, nb := uint64(cfg.slots), uint64(cfg.bulk)
	bbatch := uint64(math.MaxUint64) // no bulk region: nothing to publish
	if nb != 0 {
		bbatch = nb / 8
	}
	c := &Conn{
		cfg:         cfg,
		mem:         mem,
		txSpin:      newSpinBudget(o.spinWindow()),
		rxSpin:      newSpinBudget(o.spinWindow()),
		sock:        sock,
		log:         o.logger(),
		myClosedp:   word(mem, offClosed0+s*blockSize),
		peerClosedp: word(mem, offClosed0+peer*blockSize),
		capsFD:      -1,
		closed:      make(chan struct{}),
		watchDone:   make(chan struct{}),
		tx: producer{
			slots: ring(s), n: n, mask: n - 1,
			headp: ctl(s, offHead), waitp: ctl(s, offProdWait), peerWaitp: ctl(s, offConsWait),
			bulk: bulk(s), bmask: nb - 1, bheadp: ctl(s, offBulkHead),
		},
		rx: consumer{
			slots: ring(peer), n: n, mask: n - 1, maxMsg: cfg.maxMsg,
			batch: max(1, n/8),
			headp: ctl(peer, offHead), waitp: ctl(peer, offConsWait), peerWaitp: ctl(peer, offProdWait),
			bulk: bulk(peer), bmask: nb - 1, bbatch: bbatch, bheadp: ctl(peer, offBulkHead),
			msgLen: -1,
		},
	}
	// Our wake-up sockets: we park on the data socket for our incoming
	// ring and signal on it for our outgoing one; the space socket the
	// other way round.
	data, space := f.Wake[side][wakeData], f.Wake[side][wakeSpace]
	if c.rxPark, err = newParker(data, "ump-data", c.rxSleep, c.peerGone); err != nil {
		syscall.Munmap(mem)
		return nil, err
	}
	f.Wake[side][wakeData] = -1
	if c.txPark, err = newParker(space, "ump-space", c.txSleep, c.peerGone); err != nil {
		c.rxPark.f.Close()
		syscall.Munmap(mem)
		return nil, err
	}
	f.Wake[side][wakeSpace] = -1
	c.txWake, c.rxWake = data, space
	c.capsFD, f.Caps[side] = f.Caps[side], -1
	return c, nil
}

// checkFiles checks side's descriptors in f, which came from elsewhere,
// and sock (see Open), and returns the size of the shared memory.
func checkFiles(side Side, f *Files, sock *net.UnixConn) (int, error) {
	size, err := checkMemfd(f.Mem)
	if err != nil {
		return 0, err
	}
	var sockSt syscall.Stat_t
	if err := fstatConn(sock, &sockSt); err != nil {
		return 0, err
	}
	seen, err := checkWakeSockets(f.Wake[side][:], sockSt.Ino)
	if err != nil {
		return 0, err
	}
	if _, err := checkSocket(f.Caps[side], syscall.SOCK_SEQPACKET, "caps", seen); err != nil {
		return 0, err
	}
	return size, nil
}

// fstatConn stats the descriptor of a connection.
func fstatConn(sc syscall.Conn, st *syscall.Stat_t) error {
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), st) }); err != nil {
		return err
	}
	if serr != nil {
		return os.NewSyscallError("fstat", serr)
	}
	return nil
}

// The setup handshake on the socket: the creator sends hello with the
// attacher's descriptors (SCM_RIGHTS: the memfd, then the attacher's data,
// space and caps sockets), the attacher answers with an ack once it has mapped
// the rings.
const (
	helloMagic = 0x314f4c4c45484d55 // "UMHELLO1"
	ackMagic   = 0x314b4341504d55   // "UMPACK1\0"
	helloSize  = 16
	helloFDs   = 4
	ackOK      = 0
	ackRefused = 1
)

// Create creates a ring pair configured by o, hands its descriptors to the
// peer over sock (a connected Unix socket, which the connection takes over:
// it is closed on failure too) and returns the Creator side once the peer
// has attached. ctx bounds the handshake.
func Create(ctx context.Context, sock *net.UnixConn, o *Options) (*Conn, error) {
	f, err := NewFiles(o)
	if err != nil {
		sock.Close()
		return nil, err
	}
	c, err := create(ctx, sock, f, o)
	if err != nil {
		f.Close()
		sock.Close()
		return nil, fmt.Errorf("ump: create: %w", err)
	}
	return c, nil
}

func create(ctx context.Context, sock *net.UnixConn, f *Files, o *Options) (*Conn, error) {
	hello := make([]byte, helloSize)
	binary.LittleEndian.PutUint64(hello[0:], helloMagic)
	binary.LittleEndian.PutUint32(hello[8:], Version)
	binary.LittleEndian.PutUint32(hello[12:], helloFDs)
	theirs, err := f.take(Attacher)
	if err != nil {
		f.Close()
		return nil, err
	}
	// Sent, then closed: after the hello only the attacher holds its ends.
	defer theirs.Close()
	send := []int{theirs.Mem, theirs.Wake[Attacher][wakeData], theirs.Wake[Attacher][wakeSpace], theirs.Caps[Attacher]}
	// Map our side before the peer can touch the memory.
	c, err := open(Creator, f, sock, o, true)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Conn, error) {
		c.Close() // closes sock too; Create closing it again is harmless
		return nil, err
	}
	release := deadline(ctx, sock)
	defer release()
	if _, _, err := sock.WriteMsgUnix(hello, syscall.UnixRights(send...), nil); err != nil {
		return fail(ctxErr(ctx, err))
	}
	var ack [helloSize]byte
	if _, err := io.ReadFull(sock, ack[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fail(fmt.Errorf("%w: the peer closed the socket during the handshake", ErrPeerDied))
		}
		return fail(ctxErr(ctx, err))
	}
	if m := binary.LittleEndian.Uint64(ack[0:]); m != ackMagic {
		return fail(fmt.Errorf("%w: bad handshake answer %#x", ErrProtocol, m))
	}
	if st := binary.LittleEndian.Uint32(ack[8:]); st != ackOK {
		return fail(fmt.Errorf("%w: the peer refused the ring pair (status %d)", ErrProtocol, st))
	}
	if err := release(); err != nil {
		return fail(err)
	}
	c.start()
	return c, nil
}

// Attach receives a ring pair's descriptors from the creator over sock (a
// connected Unix socket, which the connection takes over: it is closed on
// failure too), checks and maps them, and returns the Attacher side. ctx
// bounds the handshake.
func Attach(ctx context.Context, sock *net.UnixConn, o *Options) (*Conn, error) {
	c, err := attach(ctx, sock, o)
	if err != nil {
		sock.Close()
		return nil, fmt.Errorf("ump: attach: %w", err)
	}
	return c, nil
}

func attach(ctx context.Context, sock *net.UnixConn, o *Options) (*Conn, error) {
	release := deadline(ctx, sock)
	defer release()
	var hello [helloSize]byte
	oob := make([]byte, syscall.CmsgSpace(16*4))
	n, oobn, flags, _, err := sock.ReadMsgUnix(hello[:], oob)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	fds, perr := parseRights(oob[:oobn])
	f := attacherFiles(fds)
	defer f.Close()
	switch {
	case perr != nil:
		return nil, perr
	case flags&syscall.MSG_CTRUNC != 0:
		return nil, fmt.Errorf("%w: too many descriptors in the handshake", ErrProtocol)
	case n == 0:
		return nil, fmt.Errorf("%w: the peer closed the socket during the handshake", ErrPeerDied)
	}
	if n < helloSize {
		if _, err := io.ReadFull(sock, hello[n:]); err != nil {
			return nil, ctxErr(ctx, err)
		}
	}
	le := binary.LittleEndian
	if m, v := le.Uint64(hello[0:]), le.Uint32(hello[8:]); m != helloMagic || v != Version {
		refuse(sock)
		return nil, fmt.Errorf("%w: bad handshake (magic %#x, version %d)", ErrProtocol, m, v)
	}
	if nfd := le.Uint32(hello[12:]); nfd != helloFDs || len(fds) != helloFDs {
		refuse(sock)
		return nil, fmt.Errorf("%w: handshake announces %d descriptors and carries %d, want %d", ErrProtocol, nfd, len(fds), helloFDs)
	}
	c, err := open(Attacher, f, sock, o, false)
	if err != nil {
		refuse(sock)
		return nil, err
	}
	var ack [helloSize]byte
	le.PutUint64(ack[0:], ackMagic)
	le.PutUint32(ack[8:], ackOK)
	if _, err := sock.Write(ack[:]); err != nil {
		c.Close()
		return nil, ctxErr(ctx, err)
	}
	if err := release(); err != nil {
		c.Close()
		return nil, err
	}
	c.start()
	return c, nil
}

func refuse(sock *net.UnixConn) {
	var ack [helloSize]byte
	binary.LittleEndian.PutUint64(ack[0:], ackMagic)
	binary.LittleEndian.PutUint32(ack[8:], ackRefused)
	sock.Write(ack[:])
}

// attacherFiles returns the Files of the attacher's descriptors a hello
// brought, fds, if they are the helloFDs expected; otherwise it closes
// them and returns no Files.
func attacherFiles(fds []int) *Files {
	f := noFiles()
	if len(fds) == helloFDs {
		f.Mem, f.Wake[Attacher], f.Caps[Attacher] = fds[0], [2]int{fds[1], fds[2]}, fds[3]
	} else {
		closeFDs(fds...)
	}
	return f
}

// parseRights returns every descriptor carried by the control messages.
// They are close-on-exec already: every receive here passes
// MSG_CMSG_CLOEXEC (net's ReadMsgUnix does on Linux), so that no exec in
// another goroutine sees them open, and no fcntl(2) per descriptor is
// needed after.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: bad control message: %v", ErrProtocol, err)
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != syscall.SOL_SOCKET || msgs[i].Header.Type != syscall.SCM_RIGHTS {
			continue
		}
		got, err := syscall.ParseUnixRights(&msgs[i])
		if err != nil {
			closeFDs(fds...)
			return nil, fmt.Errorf("%w: bad descriptors: %v", ErrProtocol, err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// deadline applies ctx's deadline and cancellation to sock until the
// returned function is called. That function may be called more than once;
// it clears the deadline and reports the context's error if the context
// ended.
func deadline(ctx context.Context, sock *net.UnixConn) func() error {
	if dl, ok := ctx.Deadline(); ok {
		sock.SetDeadline(dl)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		sock.SetDeadline(longAgo)
		close(fired)
	})
	released := false
	return func() error {
		if !released {
			released = true
			if !stop() {
				<-fired
			}
			sock.SetDeadline(time.Time{})
		}
		return ctx.Err()
	}
}

// ctxErr prefers the context's error to the timeout it caused.
func ctxErr(ctx context.Context, err error) error {
	if e := ctx.Err(); e != nil {
		return e
	}
	return err
}

// Pipe returns the two sides of a new ring pair, connected by a socket
// pair, in this process. It is meant for tests and examples: between
// goroutines of one process the local interconnect is cheaper.
func Pipe(o *Options) (*Conn, *Conn, error) {
	a, b, err := SocketPair()
	if err != nil {
		return nil, nil, err
	}
	type result struct {
		c   *Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := Attach(context.Background(), b, o)
		ch <- result{c, err}
	}()
	ca, errA := Create(context.Background(), a, o)
	rb := <-ch
	if errA != nil || rb.err != nil {
		if ca != nil {
			ca.Close()
		}
		if rb.c != nil {
			rb.c.Close()
		}
		return nil, nil, errors.Join(errA, rb.err)
	}
	return ca, rb.c, nil
}

// LivenessPair returns the two ends of a new connected pair of Unix
// stream sockets as bare files, blocking, for a process that hands ends
// on (Caps, an endpoint) rather than use them: whoever opens an end makes
// it a connection of its own (FileConn, as OpenCaps does). SocketPair's
// ends are connections already, which costs a dozen system calls more.
func LivenessPair() (*os.File, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	return os.NewFile(uintptr(fds[0]), "ump-socket"), os.NewFile(uintptr(fds[1]), "ump-socket"), nil
}

// SocketPair returns a connected pair of Unix stream sockets, suitable for
// Create and Attach (one end may be handed to a child process with
// os/exec's ExtraFiles, after (*net.UnixConn).File).
func SocketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	a, err := FileConn(os.NewFile(uintptr(fds[0]), "ump-socket"))
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	b, err := FileConn(os.NewFile(uintptr(fds[1]), "ump-socket"))
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// FileConn turns f, a connected Unix socket (for instance a descriptor
// inherited from a parent process), into a *net.UnixConn. It takes
// ownership of f.
func FileConn(f *os.File) (*net.UnixConn, error) {
	defer f.Close()
	nc, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return nil, fmt.Errorf("ump: %s is not a Unix socket", f.Name())
	}
	return uc, nil
}

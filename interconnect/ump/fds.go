package ump

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/chanos/chanos/wire"
)

// Descriptors travel beside the rings (docs/ump.md, "Descriptors"): each
// side holds its own end of a Unix SOCK_SEQPACKET pair, the caps socket.
// A sender of a message with n descriptors first sends, on its end, one
// record (the message's sequence number among those with descriptors, and
// n) with the descriptors attached (SCM_RIGHTS), then writes the message
// into the ring. The receiver of a message whose header announces n
// descriptors takes the next record: it is there already, as it was sent
// first, and it must be the expected one with exactly n descriptors, or
// the peer broke the protocol.

const (
	capsRecordSize = 8
	// MaxFDs is the most descriptors one message carries over ump: the
	// kernel's limit for one SCM_RIGHTS message.
	MaxFDs = 253
)

// ErrTooManyFDs is returned by a send of a message with more than MaxFDs
// descriptors.
var ErrTooManyFDs = errors.New("ump: too many descriptors in one message")

// capsSocketPair returns a connected pair of Unix seqpacket sockets.
func capsSocketPair() ([2]int, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return [2]int{-1, -1}, os.NewSyscallError("socketpair", err)
	}
	return [2]int{fds[0], fds[1]}, nil
}

// sendFDs sends the record of the next message with descriptors, with
// fds attached, waiting while the peer's queue is full (the kernel bounds
// the records in flight) until ctx ends, or not at all if wait is false
// (then it reports false, having sent nothing). The caller holds smu.
func (c *Conn) sendFDs(ctx context.Context, fds []int, wait bool) (bool, error) {
	var rec [capsRecordSize]byte
	binary.LittleEndian.PutUint32(rec[0:], c.capsOut+1)
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(fds)))
	oob := syscall.UnixRights(fds...)
	for {
		err := syscall.Sendmsg(c.capsFD, rec[:], oob, nil, syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL)
		if err == nil {
			c.capsOut++
			return true, nil
		}
		if err == syscall.EINTR {
			continue
		}
		if err != syscall.EAGAIN {
			if err == syscall.EPIPE || err == syscall.ECONNRESET {
				c.peerGone()
				return false, c.Err()
			}
			return false, fmt.Errorf("ump: send descriptors: %w", os.NewSyscallError("sendmsg", err))
		}
		if !wait {
			return false, nil
		}
		if err := c.waitCapsRoom(ctx); err != nil {
			return false, err
		}
	}
}

// waitCapsRoom waits until the caps socket may take a record, the
// connection ends or ctx ends. The peer drains its queue as it reads the
// messages in its ring, so a short poll keeps the code simple at no cost
// to the common case, which never waits.
func (c *Conn) waitCapsRoom(ctx context.Context) error {
	pfd := []pollFd{{fd: int32(c.capsFD), events: pollOut}}
	for {
		if err := c.txEnded(ctx, ctx.Done()); err != nil {
			return err
		}
		if n, err := poll(pfd, 10*time.Millisecond); err != nil {
			return err
		} else if n > 0 {
			return nil
		}
	}
}

// recvFDs takes the record of the next message with descriptors, which
// announces n, and returns them. Whatever does not match (no record, a
// record out of sequence, another count, descriptors cut off) ends the
// connection as the peer's protocol violation; descriptors received with
// a bad record are closed. The caller is the only receiver.
func (c *Conn) recvFDs(n int) ([]int, error) {
	var rec [capsRecordSize + 1]byte
	oob := make([]byte, syscall.CmsgSpace(MaxFDs*4))
	var got, oobn, flags int
	var err error
	reset := false
	for {
		got, oobn, flags, _, err = syscall.Recvmsg(c.capsFD, rec[:], oob, syscall.MSG_DONTWAIT|syscall.MSG_CMSG_CLOEXEC)
		// A peer that closed with records of ours unread resets the
		// socket, and the kernel reports that once, before the records
		// the peer sent: the record is read again after it.
		if err == syscall.ECONNRESET && !reset {
			reset = true
			continue
		}
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		if err == syscall.EAGAIN {
			return nil, c.fail(protoErr(fmt.Sprintf("a message announces %d descriptors, and none were sent", n)))
		}
		return nil, c.fail(protoErr(fmt.Sprintf("receive descriptors: %v", err)))
	}
	fds, perr := parseRights(oob[:oobn])
	le := binary.LittleEndian
	switch {
	case perr != nil:
		closeFDs(fds...)
		return nil, c.fail(protoErr(perr.Error()))
	case got == 0:
		closeFDs(fds...)
		return nil, c.fail(protoErr(fmt.Sprintf("a message announces %d descriptors, and the peer's caps socket ended", n)))
	case flags&(syscall.MSG_CTRUNC|syscall.MSG_TRUNC) != 0 || got != capsRecordSize:
		closeFDs(fds...)
		return nil, c.fail(protoErr(fmt.Sprintf("malformed descriptor record (%d bytes, flags %#x)", got, flags)))
	case le.Uint32(rec[0:]) != c.capsIn+1:
		closeFDs(fds...)
		return nil, c.fail(protoErr(fmt.Sprintf("descriptor record %d where %d was due", le.Uint32(rec[0:]), c.capsIn+1)))
	case int(le.Uint32(rec[4:])) != n || len(fds) != n:
		closeFDs(fds...)
		return nil, c.fail(protoErr(fmt.Sprintf("a message announces %d descriptors; its record announces %d and carries %d", n, le.Uint32(rec[4:]), len(fds))))
	}
	c.capsIn++
	return fds, nil
}

// capFDs returns duplicates of the descriptors of caps (wire.DupFD), for
// sending: the caller closes them once sent.
func capFDs(caps []wire.Cap) ([]int, error) {
	if err := checkFDCount(len(caps)); err != nil {
		return nil, err
	}
	fds := make([]int, 0, len(caps))
	for i, cp := range caps {
		fd, err := wire.DupFD(cp)
		if err != nil {
			closeFDs(fds...)
			return nil, fmt.Errorf("ump: capability %d: %w", i, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// checkFDCount refuses n descriptors for one message if more than MaxFDs.
func checkFDCount(n int) error {
	if n > MaxFDs {
		return fmt.Errorf("%w: %d, at most %d", ErrTooManyFDs, n, MaxFDs)
	}
	return nil
}

// checkFDSend refuses, before anything is sent, a message with
// descriptors that is too large or has too many.
func (c *Conn) checkFDSend(msg []byte, fds []int) error {
	if err := checkFDCount(len(fds)); err != nil {
		return err
	}
	if len(msg) > int(c.cfg.maxMsg) {
		return c.tooLarge(len(msg))
	}
	return nil
}

// SendFDs is Send of a message with descriptors attached: the receiver,
// reading the message, gets duplicates of them (ReceiveFDs). The caller
// keeps fds, which it may close once SendFDs returns. It waits for room in
// the ring, and for the peer to take earlier messages' descriptors, until
// ctx ends; on failure nothing was sent.
func (c *Conn) SendFDs(ctx context.Context, msg []byte, fds []int) error {
	_, err := c.sendWithFDs(ctx, msg, fds, true)
	return err
}

// TrySendFDs is SendFDs without the wait: false when the ring, or the
// peer's queue of descriptors, has no room now.
func (c *Conn) TrySendFDs(msg []byte, fds []int) (bool, error) {
	return c.sendWithFDs(context.Background(), msg, fds, false)
}

func (c *Conn) sendWithFDs(ctx context.Context, msg []byte, fds []int, wait bool) (bool, error) {
	if len(fds) == 0 {
		return c.send(ctx, msg, wait)
	}
	if err := c.checkFDSend(msg, fds); err != nil {
		return false, err
	}
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.sendLockedFDs(ctx, msg, nil, nil, fds, wait)
}

// sendFDsNow is TrySendFDs that does not wait for another send either:
// it reports false, having sent nothing, also while another goroutine's
// send holds the ring (which it may, waiting for room). A caller that
// lends descriptors for the send (Link.SendFrame) relies on it to return
// at once.
func (c *Conn) sendFDsNow(msg []byte, fds []int) (bool, error) {
	if err := c.checkFDSend(msg, fds); err != nil {
		return false, err
	}
	if !c.smu.TryLock() {
		return false, nil
	}
	defer c.smu.Unlock()
	return c.sendLockedFDs(context.Background(), msg, nil, nil, fds, false)
}

// ReceiveFDs takes the n descriptors that the message just received
// announced (a chanos frame's ncaps): the caller owns them. It must be
// called by the receiver, after the receive that returned the message and
// before the next; anything amiss ends the connection with ErrProtocol.
func (c *Conn) ReceiveFDs(n int) ([]int, error) {
	if n == 0 {
		return nil, nil
	}
	if n > MaxFDs {
		return nil, c.fail(protoErr(fmt.Sprintf("a message announces %d descriptors, at most %d", n, MaxFDs)))
	}
	// A Close between the receive of the message and this one would
	// close the caps socket under recvmsg, whose number the process may
	// have given to another descriptor meanwhile: as a ReceiveExclusive,
	// this call marks itself running (Close waits for it) or sees that
	// Close has begun.
	if err := enterFlag(&c.rxIn, &c.closing, false); err != nil {
		return nil, err
	}
	defer clearFlag(&c.rxIn)
	return c.recvFDs(n)
}

// Package ump is the shared-memory interconnect between processes of one
// machine: a connection is a pair of single-producer single-consumer rings
// of 64-byte slots in a sealed memfd, one ring per direction, with Unix
// stream sockets to wake a side that sleeps and a Unix socket whose end of file
// tells that the peer closed or died. libchanos (c/src/ump.c) implements
// the same ring, byte for byte, so a Go process and a C process can be the
// two sides. docs/ump.md specifies the format and the protocols.
//
// The data path never enters the kernel while both sides are busy: Send
// copies a message into the ring and Receive copies it out, in the calling
// goroutine, with no other goroutine involved. A side that must wait spins
// for a bounded window (Options.SpinWindow), then announces in shared
// memory that it sleeps and parks its goroutine on its wake-up socket
// through the runtime's netpoller; the peer signals the socket only when it
// sees the announcement. Each side holds only its own wake-up sockets and
// every call on them passes MSG_DONTWAIT, so that nothing the peer does can
// make a signal or a wait block past its deadline.
//
// The rings carry opaque byte messages of up to Options.MaxMessageSize
// bytes (the interface's MaxFrameSize); messages longer than a slot are
// split across consecutive slots. The reader trusts nothing in shared
// memory: a peer that writes garbage ends the connection with ErrProtocol.
//
// Set-up: Create (one side) and Attach (the other) exchange the
// descriptors over a connected Unix socket; or a third party (the monitor)
// makes them with NewFiles and each side calls Open (see also Caps and
// OpenCaps).
package ump

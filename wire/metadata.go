package wire

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Metadata is what an rpc call or its reply may carry beside its
// arguments, as gRPC's metadata: keys to values, chosen by the caller (a
// trace id, a tenant, an authorisation token), which the server's handlers
// and interceptors read, or by the handler for its caller (gRPC's
// trailers). A frame without metadata carries none of it on the wire
// (docs/wire.md, "Metadata").
type Metadata map[string]string

// FlagMeta, with FlagCall, FlagReply or FlagReply|FlagError, marks a call
// or reply frame whose body is followed by a metadata trailer.
const FlagMeta uint8 = 0x10

// CarriesMetadata reports whether flags, a frame header's, are those of a
// call or reply frame with a metadata trailer.
func CarriesMetadata(flags uint8) bool {
	switch flags {
	case FlagCall | FlagMeta, FlagReply | FlagMeta, FlagReply | FlagError | FlagMeta:
		return true
	}
	return false
}

// Bounds of a call's metadata, the same in Go and C.
const (
	MaxMetadataKeys     = 32   // entries
	MaxMetadataKeyLen   = 64   // bytes of a key
	MaxMetadataValueLen = 1024 // bytes of a value
	MaxMetadataLen      = 8192 // bytes of the trailer's entries
)

// ValidMetadataKey reports what is wrong with key, or nil: a key is 1 to
// MaxMetadataKeyLen bytes (else ErrBound) of lower-case ASCII letters,
// digits, '-', '_' and '.' (else ErrHeader), so that keys compare byte
// for byte in every language.
func ValidMetadataKey(key string) error {
	if len(key) == 0 || len(key) > MaxMetadataKeyLen {
		return metadataFault(ErrBound, "metadata key %q is %d bytes; keys are 1 to %d", truncated(key), len(key), MaxMetadataKeyLen)
	}
	if i := badKeyByte(key); i >= 0 {
		return metadataFault(ErrHeader, "metadata key %q has byte 0x%02x at %d; keys are lower-case letters, digits, '-', '_' and '.'", truncated(key), key[i], i)
	}
	return nil
}

// metadataFault is a refusal of metadata on its way into a frame: the
// sender's fault (Error.Encoding).
func metadataFault(code error, format string, args ...any) error {
	return &Error{Err: code, Offset: -1, Detail: fmt.Sprintf(format, args...), Encoding: true}
}

// badKeyByte returns the index of the first byte of key that no key may
// hold, or -1.
func badKeyByte(key string) int {
	for i := 0; i < len(key); i++ {
		if c := key[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return i
		}
	}
	return -1
}

func truncated(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// AppendMetadata appends md, as a metadata trailer, to the call or reply
// frame (an error reply's too) at the start of b (its header's size must
// be len(b)), and sets the frame's FlagMeta and size. Empty metadata
// appends nothing. It fails, leaving b as it was, if md breaks a bound or
// a key is invalid.
func AppendMetadata(b []byte, md Metadata) ([]byte, error) {
	if len(md) == 0 {
		return b, nil
	}
	if len(b) < HeaderSize || !CarriesMetadata(b[offFlags]|FlagMeta) {
		return b, metadataFault(ErrHeader, "metadata on a frame that is not an rpc call or reply")
	}
	if len(md) > MaxMetadataKeys {
		return b, metadataFault(ErrBound, "metadata of %d keys; at most %d", len(md), MaxMetadataKeys)
	}
	keys := make([]string, 0, len(md))
	n := 0
	for k, v := range md {
		if err := ValidMetadataKey(k); err != nil {
			return b, err
		}
		if len(v) > MaxMetadataValueLen {
			return b, metadataFault(ErrBound, "metadata %q: value of %d bytes; at most %d", k, len(v), MaxMetadataValueLen)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return b, metadataFault(ErrNUL, "metadata %q: the value holds a NUL byte", k)
		}
		keys = append(keys, k)
		n += 1 + len(k) + 2 + len(v)
	}
	if n > MaxMetadataLen {
		return b, metadataFault(ErrBound, "metadata of %d bytes; at most %d", n, MaxMetadataLen)
	}
	slices.Sort(keys) // the same metadata makes the same frame
	start := len(b)
	for _, k := range keys {
		v := md[k]
		b = append(b, byte(len(k)))
		b = append(b, k...)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
		b = append(b, v...)
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(b)-start))
	b[offFlags] |= FlagMeta
	binary.LittleEndian.PutUint32(b[offSize:], uint32(len(b)))
	return b, nil
}

// SplitMetadata parses the metadata trailer of frame, a call or reply
// frame with FlagMeta (CarriesMetadata of its flags, and its size field
// its length), and returns the frame without it, in a new buffer with
// FlagMeta cleared and its size set, as the frame would have been without
// metadata: what the connection layer hands the decoders, which refuse
// FlagMeta. frame itself is not modified. A malformed trailer fails with
// an *Error that matches the rejection code of its first fault, in the
// order of docs/wire.md, "Metadata": bound, truncated, header (a key of
// bytes a key may not hold) or nul (a value with a NUL byte).
func SplitMetadata(frame []byte) ([]byte, Metadata, error) {
	if len(frame) < HeaderSize || !CarriesMetadata(frame[offFlags]) ||
		binary.LittleEndian.Uint32(frame[offSize:]) != uint32(len(frame)) {
		return nil, nil, &Error{Err: ErrHeader, Offset: offFlags, Detail: "not a call or reply frame with metadata"}
	}
	n := len(frame)
	if n < HeaderSize+2 {
		return nil, nil, &Error{Err: ErrTruncated, Offset: n, Detail: "frame with metadata ends before the trailer's length"}
	}
	blockLen := int(binary.LittleEndian.Uint16(frame[n-2:]))
	if blockLen > MaxMetadataLen || blockLen > n-2-HeaderSize {
		return nil, nil, &Error{Err: ErrBound, Offset: n - 2, Detail: fmt.Sprintf("metadata trailer of %d bytes in a frame of %d (at most %d)", blockLen, n, MaxMetadataLen)}
	}
	start, end := n-2-blockLen, n-2
	md := make(Metadata)
	prev := ""
	for off := start; off < end; {
		if len(md) == MaxMetadataKeys {
			return nil, nil, &Error{Err: ErrBound, Offset: off, Detail: fmt.Sprintf("more than %d metadata keys", MaxMetadataKeys)}
		}
		klen := int(frame[off])
		if klen == 0 || klen > MaxMetadataKeyLen {
			return nil, nil, &Error{Err: ErrBound, Offset: off, Detail: fmt.Sprintf("metadata key of %d bytes; keys are 1 to %d", klen, MaxMetadataKeyLen)}
		}
		if off+1+klen+2 > end {
			return nil, nil, &Error{Err: ErrTruncated, Offset: off, Detail: "metadata key cut short"}
		}
		k := string(frame[off+1 : off+1+klen])
		if i := badKeyByte(k); i >= 0 {
			return nil, nil, &Error{Err: ErrHeader, Offset: off + 1 + i, Detail: fmt.Sprintf("metadata key %q has byte 0x%02x; keys are lower-case letters, digits, '-', '_' and '.'", k, k[i])}
		}
		// Strictly increasing keys: one encoding per metadata, and a key
		// repeated is out of order too.
		if off > start && k <= prev {
			return nil, nil, &Error{Err: ErrBound, Offset: off + 1, Detail: fmt.Sprintf("metadata key %q after %q: keys are sorted, each once", k, prev)}
		}
		vlen := int(binary.LittleEndian.Uint16(frame[off+1+klen:]))
		voff := off + 1 + klen + 2
		if vlen > MaxMetadataValueLen || voff+vlen > end {
			return nil, nil, &Error{Err: ErrBound, Offset: off + 1 + klen, Detail: fmt.Sprintf("metadata %q: value of %d bytes", k, vlen)}
		}
		v := string(frame[voff : voff+vlen])
		if strings.IndexByte(v, 0) >= 0 {
			return nil, nil, &Error{Err: ErrNUL, Offset: voff, Detail: fmt.Sprintf("metadata %q: value holds a NUL byte", k)}
		}
		md[k] = v
		prev, off = k, voff+vlen
	}
	out := make([]byte, start)
	copy(out, frame[:start])
	out[offFlags] &^= FlagMeta
	binary.LittleEndian.PutUint32(out[offSize:], uint32(start))
	return out, md, nil
}

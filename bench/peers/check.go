package peers

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

func putCallID(b []byte, id uint64) { binary.LittleEndian.PutUint64(b, id) }

// checkEcho checks an echoed payload: its op, its length, and its first
// and last bytes (checking every byte would measure memcmp).
func checkEcho(op, wantOp byte, got, want []byte) error {
	if op != wantOp {
		return fmt.Errorf("reply op %d, want %d", op, wantOp)
	}
	if len(got) != len(want) {
		return fmt.Errorf("echo of %d bytes, sent %d", len(got), len(want))
	}
	if len(got) > 0 && (got[0] != want[0] || got[len(got)-1] != want[len(want)-1]) {
		return fmt.Errorf("echo differs from what was sent")
	}
	return nil
}

// checkCall checks the reply p to call id with argument arg.
func checkCall(op byte, p []byte, id uint64, arg []byte) error {
	if op != opCall {
		return fmt.Errorf("reply op %d to a call", op)
	}
	if len(p) != callIDLen+len(arg) {
		return fmt.Errorf("call reply of %d bytes, want %d", len(p), callIDLen+len(arg))
	}
	if got := binary.LittleEndian.Uint64(p); got != id {
		return fmt.Errorf("reply to call %d, want %d", got, id)
	}
	if !bytes.Equal(p[callIDLen:], arg) {
		return fmt.Errorf("call reply differs from the argument")
	}
	return nil
}

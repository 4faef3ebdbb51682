package gokbd

// Scancode set 2, the set of IBM AT and PS/2 keyboards: a key's make code
// is one byte, or 0xE0 and a byte for the extended keys; its break code
// is the make code with 0xF0 before its last byte. Codes are mapped to
// Linux input key codes (linux/input-event-codes.h).

// set2 maps the one-byte make codes to key codes.
var set2 = map[byte]uint16{
	0x76: 1,                                                                                    // Esc
	0x16: 2, 0x1E: 3, 0x26: 4, 0x25: 5, 0x2E: 6, 0x36: 7, 0x3D: 8, 0x3E: 9, 0x46: 10, 0x45: 11, // 1 … 9, 0
	0x4E: 12, 0x55: 13, 0x66: 14, 0x0D: 15, // - = Backspace Tab
	0x15: 16, 0x1D: 17, 0x24: 18, 0x2D: 19, 0x2C: 20, 0x35: 21, 0x3C: 22, 0x43: 23, 0x44: 24, 0x4D: 25, // Q … P
	0x54: 26, 0x5B: 27, 0x5A: 28, 0x14: 29, // [ ] Enter LeftCtrl
	0x1C: 30, 0x1B: 31, 0x23: 32, 0x2B: 33, 0x34: 34, 0x33: 35, 0x3B: 36, 0x42: 37, 0x4B: 38, // A … L
	0x4C: 39, 0x52: 40, 0x0E: 41, 0x12: 42, 0x5D: 43, // ; ' ` LeftShift \
	0x1A: 44, 0x22: 45, 0x21: 46, 0x2A: 47, 0x32: 48, 0x31: 49, 0x3A: 50, // Z … M
	0x41: 51, 0x49: 52, 0x4A: 53, 0x59: 54, 0x11: 56, 0x29: 57, 0x58: 58, // , . / RightShift LeftAlt Space CapsLock
	0x05: 59, 0x06: 60, 0x04: 61, 0x0C: 62, 0x03: 63, 0x0B: 64, 0x83: 65, 0x0A: 66, 0x01: 67, 0x09: 68, // F1 … F10
	0x78: 87, 0x07: 88, // F11 F12
}

// set2E0 maps the extended make codes (after 0xE0) to key codes.
var set2E0 = map[byte]uint16{
	0x14: 97, 0x11: 100, 0x1F: 125, // RightCtrl RightAlt LeftMeta
	0x6C: 102, 0x75: 103, 0x7D: 104, 0x6B: 105, 0x74: 106, 0x69: 107, 0x72: 108, 0x7A: 109, // Home Up PageUp Left Right End Down PageDown
	0x70: 110, 0x71: 111, // Insert Delete
}

// Decoder turns scancode bytes into key events, one byte at a time, as
// they arrive with their interrupts.
type Decoder struct {
	extended, release bool
}

// Feed takes the next byte. It returns the key event the byte completes,
// if any: ok is false for a prefix, and for a code no key has (which is
// dropped).
func (d *Decoder) Feed(b byte) (code uint16, pressed, ok bool) {
	switch b {
	case 0xE0:
		d.extended = true
		return 0, false, false
	case 0xF0:
		d.release = true
		return 0, false, false
	}
	table := set2
	if d.extended {
		table = set2E0
	}
	code, ok = table[b]
	pressed = !d.release
	d.extended, d.release = false, false
	return code, pressed, ok
}

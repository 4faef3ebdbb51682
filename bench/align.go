package bench

import "unsafe"

// pageOffset returns how many bytes into b the next 4096-byte boundary is.
func pageOffset(b []byte) int {
	return int((4096 - uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4096) % 4096)
}

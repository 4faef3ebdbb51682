package spawn

// AwaitHashBeforeSending makes Ship wait for a file's hash before it
// sends its first chunk, until the returned function undoes it.
func AwaitHashBeforeSending() (undo func()) {
	shipAwaitHash = true
	return func() { shipAwaitHash = false }
}

// AfterEachChunk makes Ship call f after each chunk it sends, with the
// bytes sent so far, until the returned function undoes it.
func AfterEachChunk(f func(sent int64)) (undo func()) {
	shipAfterChunk = f
	return func() { shipAfterChunk = nil }
}

// ErrFileShrank is errFileShrank, for tests.
var ErrFileShrank = errFileShrank

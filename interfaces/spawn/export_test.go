package spawn

// AwaitHashBeforeSending makes Ship wait for a file's hash before it
// sends its first chunk, until the returned function undoes it.
func AwaitHashBeforeSending() (undo func()) {
	shipAwaitHash = true
	return func() { shipAwaitHash = false }
}

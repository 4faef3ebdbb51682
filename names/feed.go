package names

// NewWatcher makes a Watcher for a Store outside this package, with room
// for buffer events. The store calls send to deliver an event (false: the
// buffer is full, and the store should end the watch with
// ErrWatchOverflow) and end, once, to close C with why (nil for Stop or
// the end of the watch's context); stop is what Watcher.Stop calls. The
// store must serialize send and end, and never call send after end.
func NewWatcher(buffer int, stop func()) (w *Watcher, send func(Event) bool, end func(error)) {
	c := make(chan Event, buffer)
	w = &Watcher{C: c, c: c, stop: stop, done: make(chan struct{})}
	send = func(ev Event) bool {
		select {
		case c <- ev:
			return true
		default:
			return false
		}
	}
	end = func(err error) {
		w.err = err
		close(c)
		close(w.done)
	}
	return w, send, end
}

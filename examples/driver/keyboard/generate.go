package keyboard

// The Go code of examples/driver/keyboard.if: the key events of seed 002's
// driver experiment.
//go:generate go run github.com/chanos/chanos/cmd/chanosc -lang go -o . ../keyboard.if

package files

// The Go code of testdata/caps/files.if, an interface whose messages carry
// descriptors, for the tests of capabilities between Go and C domains
// (tests/interop).
//go:generate go run github.com/chanos/chanos/cmd/chanosc -lang go -o . ../../../testdata/caps/files.if

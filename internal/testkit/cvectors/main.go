// Command cvectors turns a wire vector file (testdata/wire/*.json, format in
// testdata/wire/README.md) into a C test program for the code chanosc
// generates from the vectors' interface:
//
//	go run ./internal/testkit/cvectors -o out.c testdata/wire/alltypes.json
//
// The program includes "IFACE.h" and is linked with IFACE.c and libchanos.
// For every good vector it fills the message struct with the vector's
// values, encodes it and compares the bytes, then decodes the bytes with
// the typed and the interface-wide decoder and compares every field. Every
// malformed vector must fail with its error code, every unencodable one
// must fail to encode, each describing its fault (struct
// chanos_wire_fault); with CHANOS_VECTOR_FAULTS set the program prints
// the descriptions, "fault<TAB>NAME<TAB>TEXT", which cvectors_test.go
// compares with Go's. A mutation test then decodes random corruptions of
// every good frame: decoding must return 0 or an error code with its fault
// described, never crash (run it under AddressSanitizer and
// UndefinedBehaviorSanitizer), and a frame that decodes must encode back
// to the same bytes.
//
// The C build (c/tests/CMakeLists.txt) runs it for each vector file.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/chanos/chanos/idl"
)

func main() {
	out := flag.String("o", "", "write the C test to `FILE` (default: standard output)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: cvectors [-o FILE] VECTORS.json\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *out); err != nil {
		fmt.Fprintf(os.Stderr, "cvectors: %v\n", err)
		os.Exit(1)
	}
}

func run(path, out string) error {
	src, err := generateFile(path)
	if err != nil {
		return err
	}
	if out == "" {
		_, err = os.Stdout.Write(src)
		return err
	}
	// Write only on change, so that build tools see no spurious update.
	if old, err := os.ReadFile(out); err == nil && string(old) == string(src) {
		return nil
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, src, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// generateFile reads a vector file and its interface and returns the C test.
func generateFile(path string) ([]byte, error) {
	vf, err := readVectors(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	var includes []string
	for _, inc := range vf.Includes {
		includes = append(includes, filepath.Join(dir, inc))
	}
	iface, err := idl.Load(filepath.Join(dir, vf.Interface), includes, idl.Options{})
	if err != nil {
		return nil, err
	}
	return generate(iface, vf, filepath.Base(path))
}

// Package gen holds what the chanosc back ends share: the generated-file
// type and the interface every back end implements.
package gen

import "github.com/chanos/chanos/idl"

// File is one generated file. Name is relative to the output directory.
type File struct {
	Name string
	Data []byte
}

// Backend turns a checked interface into source files of one language.
// Generate must be deterministic: the same interface gives the same bytes.
type Backend interface {
	Generate(iface *idl.Interface) ([]File, error)
}

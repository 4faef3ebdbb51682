// Package wirevectors reads the shared wire vectors, testdata/wire/*.json
// (testdata/wire/README.md), for the tools and tests that check a codec
// against them with the vectors' values as encoding/json gives them.
package wirevectors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// File is the content of testdata/wire/NAME.json.
type File struct {
	Interface   string   `json:"interface"`
	Includes    []string `json:"includes"`
	Vectors     []Vector `json:"vectors"`
	Malformed   []Vector `json:"malformed"`
	DecodeOnly  []Vector `json:"decode_only"`
	Unencodable []Vector `json:"unencodable"`
}

// Vector is one frame of a File: its message, kind and fields, its bytes,
// or the error code that refuses it.
type Vector struct {
	Name    string         `json:"name"`
	Message string         `json:"message"`
	Kind    string         `json:"kind"`
	NCaps   int            `json:"ncaps"`
	Fields  map[string]any `json:"fields"`
	Hex     string         `json:"hex"`
	Error   string         `json:"error"`
}

// Read reads the vector file at path. Integers stay json.Numbers, so
// that 64-bit ones stay exact.
func Read(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if f.Interface == "" {
		return nil, fmt.Errorf("%s: no interface named", path)
	}
	return &f, nil
}

// Package versions holds the Go code of two versions of one interface,
// calc (testdata/versions): version 1 in calcv1, version 2, whose add
// takes an int32 rather than an int64, in calcv2. The tests of
// fingerprints bind a client of one to a server of the other.
package versions

//go:generate go run github.com/chanos/chanos/cmd/chanosc -lang go -o calcv1 ../../../testdata/versions/v1/calc.if
//go:generate go run github.com/chanos/chanos/cmd/chanosc -lang go -o calcv2 ../../../testdata/versions/v2/calc.if

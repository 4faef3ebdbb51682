// Package wiretest runs the shared wire vectors of testdata/wire against
// the Go code chanosc generates, and holds the fuzz targets and benchmarks
// of the generated encoders and decoders and a client/server round trip
// over an in-memory transport. The generated packages it tests are
// committed beside it; regenerate them with go generate (make generate).
package wiretest

//go:generate go run github.com/chanos/chanos/cmd/chanosc -lang go -o alltypes -i ../../../testdata/wire/types.if ../../../testdata/wire/alltypes.if
//go:generate go run github.com/chanos/chanos/cmd/chanosc -lang go -o pingpong pingpong.if

// Package interfaces holds the interfaces bundled with chanos, as IDL
// files, and their generated Go packages in the subdirectories of the same
// names. The monitor protocol's Go code is generated from monitor.if into
// internal/protocol/monitor instead, beside the runtime that speaks it. Run
// `make generate` (or `go generate ./interfaces`) after editing an
// interface; CI checks that the generated code is up to date.
package interfaces

//go:generate go run ../cmd/chanosc -lang go -o pingpong pingpong.if
//go:generate go run ../cmd/chanosc -lang go -o kv kv.if
//go:generate go run ../cmd/chanosc -lang go -o nameservice nameservice.if
//go:generate go run ../cmd/chanosc -lang go -o grant grant.if
//go:generate go run ../cmd/chanosc -lang go -o spawn spawn.if
//go:generate go run ../cmd/chanosc -lang go -o health health.if
//go:generate go run ../cmd/chanosc -lang go -o reflection reflection.if

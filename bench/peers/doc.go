// Package peers measures the IPC systems that chanos competes with (its
// "peers") on the workloads of `chanos bench`: ping-pong round trips,
// one-way streams, request/response RPCs, and one server with several
// clients.
//
// Each peer is a [Peer]. Every peer except go-chan runs its server in a
// separate process: the driver re-executes its own binary with the hidden
// [ServeCommand] argument, and that process calls [ServeMain]. A program
// that embeds the driver must therefore dispatch that argument first:
//
//	if len(os.Args) > 1 && os.Args[1] == peers.ServeCommand {
//		os.Exit(peers.ServeMain(os.Args[2:]))
//	}
//
// [Run] drives the suites and hands each measurement to a callback as a
// [Result], whose JSON form is the line format shared with `chanos bench`.
//
// This package lives in its own module so that the core chanos module
// never depends on gRPC or shmipc-go.
package peers

package machine

// The Go code of the protocol between the monitors of two machines
// (interfaces/machine.if), generated from its IDL. It lives beside the
// monitor protocol rather than among the generated packages of
// interfaces/, which import the runtime.
//go:generate go run ../../../cmd/chanosc -lang go -messages-only -o . ../../../interfaces/machine.if

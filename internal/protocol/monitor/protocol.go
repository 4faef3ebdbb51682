package monitor

// The Go code of the monitor protocol, generated from the bundled IDL
// (interfaces/monitor.if, which libchanos compiles too). It lives here,
// beside the runtime that speaks it, rather than among the generated
// packages of interfaces/, which import the runtime.
//go:generate go run ../../../cmd/chanosc -lang go -messages-only -o . ../../../interfaces/monitor.if

// ProtocolVersion is the version of the monitor protocol: the version
// hello's call carries and its reply names.
const ProtocolVersion = 4

// Hello's feature bits. FeatureNet: the domain's library dials
// connections over the net interconnect (binds of other machines'
// exports). FeatureNetAccept: it accepts them (its exports may be bound
// from other machines).
const (
	FeatureNet       uint32 = 1
	FeatureNetAccept uint32 = 2
)

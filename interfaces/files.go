package interfaces

import "embed"

// Files holds the IDL files of the bundled interfaces, by their base
// names ("kv.if", "health.if"), for tools that compile an interface when
// they run: `chanos call health.if ...` finds one here when no such file
// is at hand.
//
//go:embed *.if
var Files embed.FS

#include "textflag.h"

// func spinPause()
TEXT ·spinPause(SB), NOSPLIT|NOFRAME, $0-0
	PAUSE
	RET

// func storeRelease(p *uint64, v uint64)
// A plain store: x86-64 stores are release stores, and the call keeps the
// compiler from moving earlier stores after it.
TEXT ·storeRelease(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET

#include "textflag.h"

// func rdtsc() int64
//
// LFENCE first, so the counter is read after every earlier instruction
// (the syscall of the op just timed) has completed.
TEXT ·rdtsc(SB), NOSPLIT, $0-8
	LFENCE
	RDTSC
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET

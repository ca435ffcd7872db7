// Command gofloor is floor.c's syscall loop written as a bare Go program,
// for phases/bench/metadata.sh.
//
//	gofloor <create|stat|rename|unlink> <dir> <count> <size>
//
// It issues the same syscalls as floor.c on the same layout (one worker,
// <dir>/r0/files or src and dst, files f0.<i>, names prepared before the
// timed loop), through the Go runtime's Syscall as prism does, and times
// every op with one clock read, yielding every 5 ms as prism's loops do.
// It has nothing else of prism: no recorder, no engine, no watchdog, and
// no garbage collection in the timed loop. So gofloor ÷ floor is what a Go
// process that times each op costs on the machine, and prism ÷ gofloor is
// what prism adds on top of that. Output, one line, in floor.c's format:
//
//	op=unlink nprocs=1 count=20000 size=0 ops=20000 seconds=0.21 ops_per_sec=95000 max_op_ns=81000
package main

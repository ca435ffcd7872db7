package spmd

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// TimeoutError is the error of an MPI collective that did not complete
// within its communicator's timeout. A non-blocking collective cannot say
// whom it still waits for, so the rank that timed out probed every other
// member (see doc.go) and Missing names those that kept the collective from
// completing, with what the probe learned of each.
//
// errors.Is(err, ErrTimeout) holds, and errors.As(err, &re) with a
// *RankError yields the first missing rank (ranks that did not answer the
// probe wrap ErrPeerDead as well), so callers that branch on coordination
// failures need not know this type.
type TimeoutError struct {
	// Op is the collective, e.g. "Barrier"; Seq its number among the
	// collectives of its communicator, which every member agrees on (the
	// communicator's own setup is #1, its first collective #2).
	Op  string
	Seq uint64
	// Comm names the communicator: "world", or "split <n>" for the n-th
	// made by Split in this process.
	Comm    string
	Timeout time.Duration
	// Rank and Host are the world rank that timed out (this process) and
	// its host.
	Rank int
	Host string
	// Probe is how long the probe waited for answers; zero when no probe
	// could be made (MPI was still being set up).
	Probe time.Duration
	// Missing lists the ranks that had not reached the collective, in
	// rank order. It is empty when every member answered and had reached
	// it: then MPI itself failed to complete it.
	Missing []MissingRank
}

// MissingRank is one rank that kept a collective from completing.
type MissingRank struct {
	// Rank is the world rank, Host its host as MPI names it.
	Rank int
	Host string
	// Answered says that its process answered the probe: it is alive but
	// elsewhere (still computing, doing I/O, stuck in a system call, or in
	// another collective). A rank that did not answer is stopped, hung as a
	// whole, or unreachable.
	Answered bool
	// Detail says what the probe learned, in words.
	Detail string
}

func (e *TimeoutError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "spmd: mpi: %s (collective #%d on the %s communicator) timed out after %v on rank %d",
		e.Op, e.Seq, e.Comm, e.Timeout, e.Rank)
	if e.Host != "" {
		fmt.Fprintf(&b, " (host %s)", e.Host)
	}
	switch {
	case e.Probe == 0:
		b.WriteString(": no probe possible yet, so the missing ranks are unknown")
	case len(e.Missing) == 0:
		fmt.Fprintf(&b, ": every member answered a probe within %v and had reached this collective, so MPI itself did not complete it", e.Probe)
	}
	for i, m := range e.Missing {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%srank %d (host %s) %s", sep, m.Rank, m.Host, m.Detail)
	}
	return b.String()
}

// Unwrap yields ErrTimeout, then one *RankError per missing rank.
func (e *TimeoutError) Unwrap() []error {
	errs := make([]error, 0, 1+len(e.Missing))
	errs = append(errs, ErrTimeout)
	for _, m := range e.Missing {
		cause := errors.New(m.Detail)
		if !m.Answered {
			cause = fmt.Errorf("%w: %s", ErrPeerDead, m.Detail)
		}
		errs = append(errs, &RankError{Rank: m.Rank, Op: e.Op, Err: cause})
	}
	return errs
}

// probeAnswer is what one member's responder said about a communicator.
type probeAnswer struct {
	answered bool
	known    bool   // the member has the communicator open
	entered  uint64 // collectives it has entered on it
	inside   collOp // the one it is in, or collNone
}

// collOp names a collective in probe answers.
type collOp uint8

const (
	collNone collOp = iota
	collBarrier
	collAllreduceInt64
	collAllreduceFloat64
	collReduceInt64
	collGather
	collBcast
	collSplit
	collAlign
	collSetup
)

func (o collOp) String() string {
	switch o {
	case collBarrier:
		return "Barrier"
	case collAllreduceInt64:
		return "AllreduceInt64"
	case collAllreduceFloat64:
		return "AllreduceFloat64"
	case collReduceInt64:
		return "ReduceInt64"
	case collGather:
		return "Gather"
	case collBcast:
		return "Bcast"
	case collSplit:
		return "Split"
	case collAlign:
		return "Align"
	case collSetup:
		return "communicator setup"
	}
	return fmt.Sprintf("collective(%d)", uint8(o))
}

// missingRanks turns the answers of a probe made by a rank waiting in
// collective seq into the ranks that kept it from completing. ranks[i] is
// the world rank answers[i] came from; a member that had entered seq, or
// gone past it (a non-root leaves a rooted collective early), is not
// missing.
func missingRanks(seq uint64, ranks []int, answers []probeAnswer, host func(int) string, window time.Duration) []MissingRank {
	var out []MissingRank
	for i, a := range answers {
		m := MissingRank{Rank: ranks[i], Host: host(ranks[i]), Answered: a.answered}
		switch {
		case !a.answered:
			m.Detail = fmt.Sprintf("did not answer a liveness probe within %v: it died (a kill, the OOM killer: mpirun was told not to end the job), is stopped (SIGSTOP, a debugger), "+
				"hung as a whole (swapping, a frozen node) or unreachable", window)
		case !a.known:
			m.Detail = "is alive but does not have this communicator open (it has not made it yet, or has closed it)"
		case a.entered >= seq:
			continue
		case a.inside != collNone:
			m.Detail = fmt.Sprintf("is alive but waits in collective #%d (%v) of this communicator, not #%d: "+
				"the ranks call collectives in different orders", a.entered, a.inside, seq)
		default:
			m.Detail = fmt.Sprintf("is alive but has not reached collective #%d (it finished #%d and is outside any collective: "+
				"still computing or doing I/O, or stuck in a system call)", seq, a.entered)
		}
		out = append(out, m)
	}
	return out
}

// probeWindow is how long a rank that timed out waits for the answers to
// its probe: a tenth of the timeout, between half a second and three
// seconds. A live rank's responder answers within its poll period (20 ms),
// so even the floor leaves a loaded node ample time, while the ceiling
// keeps the verdict of a 3-minute timeout within seconds of it.
func probeWindow(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 500*time.Millisecond), 3*time.Second)
}

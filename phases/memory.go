package phases

// The memory rule prism run applies before any phase runs (checkMemory)
// and prism check applies to this host: a phase's estimate per rank plus
// what the engine holds for any phase, against [plan] max_memory or a
// share of the host's memory divided among its ranks.

// PhaseMemory is what one rank of the phase s needs at ranks ranks (its
// MemoryEstimator's figure and the engine's own), and the keys that lower
// it; ok is false for a phase that does not estimate its memory.
func PhaseMemory(s *Spec, ranks int) (need int64, keys string, ok bool) {
	est, ok := s.Phase.(MemoryEstimator)
	if !ok {
		return 0, "", false
	}
	need, keys = est.Memory(ranks)
	return need + phaseBaseMemory, keys, true
}

// RankMemoryLimit is the most a rank may plan to use: maxMemory ([plan]
// max_memory) when set, else memoryShare of the host's memory shared by
// the ranks on it; 0 means no limit (the host's memory is unknown).
func RankMemoryLimit(maxMemory Size, hostMemory int64, ranksOnHost int) int64 {
	if maxMemory > 0 {
		return int64(maxMemory)
	}
	if hostMemory <= 0 || ranksOnHost <= 0 {
		return 0
	}
	return int64(float64(hostMemory) * memoryShare / float64(ranksOnHost))
}

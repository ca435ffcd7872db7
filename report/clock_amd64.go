package report

// rdtsc reads the time-stamp counter (clock_amd64.s).
func rdtsc() int64

package phases

// SetBeforeRunStep makes f run between the engine's start of a Run and
// the step that calls it, for the external tests; restore puts the
// default back.
func SetBeforeRunStep(f func()) (restore func()) {
	old := beforeRunStep
	beforeRunStep = f
	return func() { beforeRunStep = old }
}

package torchtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// SystemPython is the interpreter Debian's python3-torch installs into
// (a python3 first on PATH, such as pyenv's, has no torch).
const SystemPython = "/usr/bin/python3"

// Required tells whether a missing oracle must fail rather than skip.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("PRISM_REQUIRE_TORCH") == "1"
}

// Missing skips t with msg, or fails it when the oracles are Required.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Python returns the interpreter that imports torch, or skips (fails
// when Required).
func Python(t testing.TB) string {
	t.Helper()
	out, err := exec.Command(SystemPython, "-c", "import torch; print(torch.__version__)").CombinedOutput()
	if err != nil {
		Missing(t, fmt.Sprintf("PyTorch is not importable by %s (%v: %s); install it: apt-get install -y python3-torch (.ci/deps.sh does)", SystemPython, err, strings.TrimSpace(string(out))))
	}
	return SystemPython
}

// Strace returns strace's path, or skips (fails when Required).
func Strace(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("strace")
	if err != nil {
		Missing(t, "strace is not installed: apt-get install -y strace (.ci/deps.sh does)")
	}
	return p
}

// Python3 returns a python3 for checks that need no torch: the system one
// when there is one (it starts in a tenth of the time a version manager's
// shim takes), else the first on PATH, or skips (fails when Required).
func Python3(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(SystemPython); err == nil {
		return SystemPython
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		Missing(t, "python3 not installed: the independent format checks need it (apt-get install -y python3-torch, .ci/deps.sh does)")
	}
	return p
}

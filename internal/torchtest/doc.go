// Package torchtest finds what the checkpoint tests use as oracles: real
// PyTorch (Debian's python3-torch, 1.13, under /usr/bin/python3) and
// strace. Where one is missing the tests skip, except where a missing one
// must fail: in CI (CI=true) and with PRISM_REQUIRE_TORCH=1, which .ci/run
// sets, since .ci/deps.sh installs both — so a missing install step fails
// make test instead of skipping the oracle tests unseen.
package torchtest

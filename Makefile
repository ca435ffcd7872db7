# prism — see README.md. `make test` installs what it needs (root, Debian).
GO      ?= go
BIN     := bin/prism
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Link MPI whenever an MPI compiler wrapper exists (evaluated when make
# starts, which is why `test` re-invokes make after installing deps).
MPICC   := $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
TAGS    := -tags mpi
GOENV   := CGO_ENABLED=1 CC=mpicc
endif
LDFLAGS := -X main.version=$(VERSION)
# OpenMPI refuses root without these; oversubscribed ranks must yield or a
# barrier costs ~10 ms instead of ~100 µs.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_rmaps_base_oversubscribe=1

.PHONY: build run test test-go deps bench fuzz lint clean slurm-up slurm-down

build:
	$(GOENV) $(GO) build $(TAGS) -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) .

# The embedded quickstart plan on 4 local ranks in a temporary directory.
run: build
	$(BIN) run -n 4 --results results

deps:
	@.ci/deps.sh

# Everything: install missing packages, then build (with MPI once mpicc
# exists) and run every test through a fresh make so MPICC is re-evaluated.
test: deps
	@$(MAKE) --no-print-directory test-go

test-go: lint build
	PRISM_BIN=$(abspath $(BIN)) $(GOENV) $(GO) test $(TAGS) -count=1 -timeout 15m ./...
	.ci/fuzz.sh 3000x

# Every fuzz target (plan decoder, host lists, HF config, fio JSON,
# manifests) for FUZZTIME seconds each.
FUZZTIME ?= 120
fuzz:
	.ci/fuzz.sh $(FUZZTIME)

# gofloor is metadata.sh's third side: floor.c's loop as a bare Go program.
bench: build
	$(GOENV) $(GO) test $(TAGS) -run '^$$' -bench . -benchmem ./report ./phases ./spmd
	$(GO) build -trimpath -o bin/gofloor ./phases/bench/gofloor
	PRISM_BIN=$(abspath $(BIN)) GOFLOOR_BIN=$(abspath bin/gofloor) ./phases/bench/metadata.sh
	PRISM_BIN=$(abspath $(BIN)) ./phases/bench/coord.sh
	PRISM_BIN=$(abspath $(BIN)) ./phases/bench/checkpoint.sh
	PRISM_BIN=$(abspath $(BIN)) ./phases/bench/blockio.sh

lint:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GOENV) $(GO) vet $(TAGS) ./...
	$(GO) vet ./...

clean:
	rm -rf bin results

# A one-node Slurm cluster (as root; installs Slurm and munge when missing)
# for trying `sbatch examples/prism.sbatch`; the Slurm test starts its own.
slurm-up:
	@slurm/cluster.sh up

slurm-down:
	@slurm/cluster.sh down

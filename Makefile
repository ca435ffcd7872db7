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

.PHONY: build run test test-go deps bench fuzz lint clean slurm-up slurm-down cluster-up cluster-down

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

# The S3 tests' server (VersityGW) is built from the Go module proxy first,
# under its own bound, so its cold build is not charged to any test.
test-go: lint build
	$(GO) test -count=1 -timeout 12m -run '^TestBinary$$' ./io/s3/s3test
	PRISM_BIN=$(abspath $(BIN)) $(GOENV) $(GO) test $(TAGS) -count=1 -timeout 15m ./...
	.ci/fuzz.sh 3000x

# Every fuzz target (plan decoder, host lists, HF config, fio JSON,
# manifests) for FUZZTIME seconds each.
FUZZTIME ?= 120
fuzz:
	.ci/fuzz.sh $(FUZZTIME)

# gofloor is metadata.sh's third side: floor.c's loop as a bare Go program.
# Installs its peers first (boto3, fsspec); workflow.sh's mdtest and IOR
# cells run when MDTEST and IOR name those binaries (built from hpc/ior,
# not packaged); the S3 cells need VersityGW,
# built from the module proxy like make test-go does.
# Every side-by-side script appends its samples to BENCH_TABLE (paired.py's
# format); the last step prints them as one table with the machine, the
# date and the load at start and end. The file stays for a later look.
BENCH_TABLE ?= $(or $(TMPDIR),/tmp)/prism-bench-table.tsv
bench: build
	@.ci/deps.sh --bench
	printf '#start\t%s\t%s\n' "$$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$(cut -d' ' -f1-3 /proc/loadavg)" >$(BENCH_TABLE)
	{ $(GOENV) $(GO) test $(TAGS) -run '^$$' -bench . -benchmem ./report ./phases/... ./spmd; echo $$? >$(BENCH_TABLE).rc; } | tee $(BENCH_TABLE).go; exit "$$(cat $(BENCH_TABLE).rc)"
	awk '$$1 ~ /^BenchmarkGatherPhase10k/ { for (i = 3; i <= NF; i++) if ($$i == "ns/op") printf "gather 10k ranks\tprism\t1\t%.2f\tms/phase\n", $$(i - 1) / 1e6 }' \
		$(BENCH_TABLE).go >>$(BENCH_TABLE)
	$(GO) build -trimpath -o bin/gofloor ./phases/bench/gofloor
	PRISM_BIN=$(abspath $(BIN)) GOFLOOR_BIN=$(abspath bin/gofloor) BENCH_TABLE=$(BENCH_TABLE) ./phases/bench/metadata.sh
	PRISM_BIN=$(abspath $(BIN)) ./phases/bench/coord.sh
	PRISM_BIN=$(abspath $(BIN)) BENCH_TABLE=$(BENCH_TABLE) ./phases/bench/checkpoint.sh
	PRISM_BIN=$(abspath $(BIN)) BENCH_TABLE=$(BENCH_TABLE) ./phases/bench/blockio.sh
	PRISM_BIN=$(abspath $(BIN)) ./phases/bench/progress.sh
	PRISM_BIN=$(abspath $(BIN)) BENCH_TABLE=$(BENCH_TABLE) ./phases/bench/workflow.sh
	$(GO) test -count=1 -timeout 12m -run '^TestBinary$$' ./io/s3/s3test
	$(GO) run ./io/s3/bench
	@echo
	@python3 phases/bench/paired.py --bench $(BENCH_TABLE)

lint:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GOENV) $(GO) vet $(TAGS) ./...
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...

clean:
	rm -rf bin results

# A one-node Slurm cluster (as root; installs Slurm and munge when missing)
# for trying `sbatch examples/prism.sbatch`; the Slurm test starts its own.
slurm-up:
	@slurm/cluster.sh up

slurm-down:
	@slurm/cluster.sh down

# NODES emulated nodes (network namespaces on a bridge, each with its own
# hostname, /tmp, slurmd and an sshfs mount of one shared directory), for
# trying prism across hosts. It replaces slurm-up's cluster (same state
# directory; the last `up` decides the shape). Then, as root:
#   eval "$(slurm/cluster.sh env)"; mpirun --host node1:2,node2:2 -np 4 bin/prism
# or sbatch -N 2 examples/prism.sbatch. See slurm/cluster.sh.
NODES ?= 4
cluster-up:
	@slurm/cluster.sh up --nodes $(NODES)

cluster-down:
	@slurm/cluster.sh down

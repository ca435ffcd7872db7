// Package phases is the framework every phase kind runs in: the Phase
// contract and its optional contracts, the explicit Registry of kinds,
// strict TOML plan decoding, and the engine that drives every phase on
// every rank (barriers, the timing window, error agreement, the cross-rank
// merge of results at rank 0, the result files). The kinds themselves live
// in one package per family under phases/.
//
// # Layout
//
//	phase.go     Phase, the optional contracts (Validator, Footprinter,
//	             MetricLiner, Fadviser, OpCounter, Runtimer, Outputter), Env,
//	             CacheMode
//	registry.go  Kind, Registry, Params (what `prism list` prints)
//	plan.go      Plan, Header, Spec, strict decoding, PlanError
//	units.go     Size (K, KB as fio reads them), Duration, CheckIOSize
//	kbbase.go    [plan] kb_base: sizes resolved before a table is decoded
//	sizes.go     Sizes: the size distributions kinds embed
//	engine.go    Execute: run directory, sweeps, groups, steps, cache policy
//	gather.go    GatherPhase: the only place results cross ranks
//	results.go   manifest, summary, [METRIC] lines, junit, report.html
//	params.go    a phase's params in the manifest, with their TOML types
//	monitor.go   stall watchdog, op_timeout, SIGUSR1 snapshots; live
//	             progress over all ranks (phase start lines, rank 0's
//	             status line from the ranks' spmd.Reporter reports)
//	yield.go     Yielder, OpClock: the shape of a timed loop
//	host.go      CollectHost: host and filesystem facts
//	storage.go   StorageOptions ([plan]/phase storage and s3_* keys), RunCloser,
//	             ObjectStore (a rank's client and run prefix in a bucket)
//	persist.go   persistent datasets and checkpoints: <workdir>/prism-datasets/
//	             <name>-<hash>/, markers, file lists, checks, list and rm
//	persistclaim.go  two jobs creating one persistent directory: the
//	             O_EXCL claim, its lease and renewal, waiting, takeover
//
//	metadata/    create/list/move/delete_files, folder_bench, synthetic_workload
//	checkpoint/  ddp/fsdp save and load, rl_load, mlperf_checkpoint
//	dataload/    create_dataset, md5_check, train, MLPerf presets and datasize
//	blockio/     blockio (prism's own fio-style loop), fio (the real fio)
//	workflow/    git_clone, tar, untar
//	object/      s3_put, s3_get, s3_stat, s3_list, s3_delete, s3_multipart
//	ckpt/        checkpoint content: models, tensor layouts, file formats (no I/O)
//	all/         Registry(): the one place that names every family
//	phasestest/  Run (in-process multi-rank plans), Env, Conformance
//
// # The rule
//
// A family imports phases, phases/ckpt, io (and io/uring), report, spmd and the standard
// library (its tests also phasestest, examples and the test helpers under
// internal/, such as internal/stracelog) — never another family.
// What two families share belongs in one of those (a generator in io, a
// statistic in report, a contract here). phases/all is the only package
// that imports every family, and only main imports it; all's tests enforce
// the rule.
//
// # To add a kind
//
//  1. Write it in its family's folder (or a new folder for a new family,
//     with a Register function): a config struct with toml and doc tags on
//     every field, pre-filled with defaults by the Kind's New; Setup, Run,
//     Verify, Teardown; whichever optional contracts apply.
//  2. Register it in the family's Register with a Summary (one line of
//     `prism list`) and a Sample (TOML keys of a small, fast instance).
//  3. A new family gets one line in phases/all.Registry.
//  4. Test it with phasestest.Run; phases/all's TestConformance runs every
//     kind's Sample through the contract.
//
// # Timed loops
//
// Timed loops follow one shape: prepare everything in Setup, then between
// two clock reads issue exactly one operation and call Recorder.Observe.
// A loop of short syscalls yields its P every 5 ms (Yielder, yield.go),
// outside any op's time, or the Go runtime's sysmon takes it for a CPU hog
// and wakes up every few tens of µs, preempting ranks on a full node. The
// metadata loops poll their context at those yields (OpClock), not before
// every op. With more than one rank, each spins 15 ms (settle) between the
// aligned start and its clock, so sysmon's burst of polling after the
// barrier wait is over before anything is timed. Before the aligned start
// every rank returns its free heap to the OS (quiesceHeap), so the
// runtime's scavenger does not madvise Setup's garbage away during the Run.
// "Everything" includes the recorders (Env.Recorder, Env.NewSet and their
// Op): a recorder's creation clears its ~270 KiB histogram, ~115 µs,
// which a Run would time. A Run leaves its worker sets to the engine,
// which merges them once the clock has stopped (Env.NewSet), and a buffer
// it reads into is prefaulted in Setup (io.Prefault): a fresh one's pages
// are faulted in by its first timed read. The conformance suite fails a
// kind whose Run makes or merges a recorder (report.Made). The one kind
// exempt is fio: the op types it records are the sections of fio's
// report, known once fio has exited, and its headline rates are fio's
// own, over fio's runtime, which that ingest is not in.
// Phases never print; they return errors that name the phase, rank and path.
package phases

// Package phasestest runs plans in tests and holds the conformance suite
// every phase kind passes.
//
// Run decodes a plan against a registry and executes it on n in-process
// ranks (a rendezvous in a temporary directory, each rank with its own
// decoded copy of the plan, as n processes would), with the workdir and the
// results in t.TempDir(), and returns rank 0's manifest; Env builds an Env
// for driving one phase's methods directly. Conformance checks every kind
// of a registry against the Phase contract (tags, defaults, footprints,
// cleanup after Teardown, a prompt return from a cancelled Run).
//
// Families test their kinds with Run against their own registry (or
// phases/all's); phasestest must not import a family itself.
package phasestest

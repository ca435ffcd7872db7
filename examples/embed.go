// Package examples holds the example plans and batch scripts. The plans are
// embedded so that `prism run` with no plan has a default (quickstart.toml)
// and tests can decode every example.
package examples

import "embed"

// FS holds every example plan (*.toml) and the batch script.
//
//go:embed *.toml
var FS embed.FS

// Quickstart is the name of the embedded default plan.
const Quickstart = "quickstart.toml"

package all

import (
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/blockio"
	"github.com/prism-hpc/prism/phases/checkpoint"
	"github.com/prism-hpc/prism/phases/dataload"
	"github.com/prism-hpc/prism/phases/metadata"
	"github.com/prism-hpc/prism/phases/object"
	"github.com/prism-hpc/prism/phases/workflow"
)

// Registry returns the registry of every phase kind prism ships: one line
// per family.
func Registry() *phases.Registry {
	r := phases.NewRegistry()
	metadata.Register(r)
	checkpoint.Register(r)
	dataload.Register(r)
	blockio.Register(r)
	workflow.Register(r)
	object.Register(r)
	return r
}

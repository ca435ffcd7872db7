// Package all is the one place that names every phase family: Registry
// registers each family's kinds. Only main (and tests that need every
// kind) import it; a family never does, and never imports another family.
package all

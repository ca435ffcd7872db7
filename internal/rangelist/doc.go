// Package rangelist formats ascending integers as a list of ranges,
// "0-3,8,10-11": the kernel's cpulist format, which prism uses for CPU
// sets (spmd.CPUList, a rank's affinity) and for sets of ranks (the
// summary's hosts). It is a leaf, so that report, which imports no other
// prism package, and spmd, the launcher, share one implementation without
// either importing the other.
package rangelist

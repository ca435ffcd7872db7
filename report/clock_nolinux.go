//go:build !linux

package report

func tscUsable() string { return "not Linux" }

func checkTSC() string { return "" }

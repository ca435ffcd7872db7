package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"

	"github.com/prism-hpc/prism/phases"
)

// cmdDatagen runs only a plan's create_dataset phases that keep their
// dataset (persist), as MLPerf Storage's datagen step: one prism run of
// this binary on the derived plan, handed over a pipe (prism run reads a
// plan from /dev/stdin), so nothing is written beside the plan.
func cmdDatagen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("datagen")
	n := fs.Int("n", 0, "start N local ranks")
	workdir := fs.String("workdir", "", "workdir (overrides [plan] workdir)")
	results := fs.String("results", "", "results directory (overrides [plan] results)")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("datagen: give one plan.toml")
	}
	p, err := loadMLPPlan(pos[0])
	if err != nil {
		return err
	}
	var gen []map[string]any
	for _, ph := range p.of("create_dataset") {
		if str(ph, "persist", "") != "" {
			gen = append(gen, ph)
		}
	}
	if len(gen) == 0 {
		return &phases.PlanError{File: pos[0], Key: "persist", Msg: "datagen keeps datasets: no create_dataset phase of the plan has persist = \"<name>\""}
	}
	b, err := p.encode(str(p.header, "name", "plan")+"-datagen", gen)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	rargs := []string{"run"}
	if *n > 0 {
		rargs = append(rargs, "-n", strconv.Itoa(*n))
	}
	if *workdir != "" {
		rargs = append(rargs, "--workdir", *workdir)
	}
	if *results != "" {
		rargs = append(rargs, "--results", *results)
	}
	cmd := exec.CommandContext(ctx, self, append(rargs, "/dev/stdin")...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(b), stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &exitError{code: ee.ExitCode()}
	}
	if err != nil {
		return fmt.Errorf("datagen: %w", err)
	}
	return nil
}

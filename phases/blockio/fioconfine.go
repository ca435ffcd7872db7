package blockio

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// fio can do far more than I/O on files: run programs (exec_prerun,
// ioengine=exec), read other files (include, read_iolog, ${VAR} from the
// environment), write anywhere (absolute log paths, a job name that
// becomes a file name through filename_format), reconfigure the host
// (ioscheduler, cgroups) or detach (daemonize, triggers). prism runs fio
// as root on shared filesystems and promises to touch nothing outside the
// run directory, so it accepts only the options below — an allow-list, so
// that an option fio adds later is refused until someone has read it —
// checks paths and names, and refuses expansion, both for inline options
// and line by line for job files. `prism list` prints the list.

// fioAllowed are the options (and aliases) prism lets through: the I/O
// pattern, engines, sizes and rates, verification, and reporting.
var fioAllowed = toSet(
	// job structure and timing
	"name", "description", "numjobs", "loops", "runtime", "time_based", "ramp_time", "startdelay",
	"stonewall", "wait_for_previous", "new_group", "group_reporting", "thread", "exitall", "exitall_on_error",
	// I/O pattern
	"rw", "readwrite", "rw_sequencer", "rwmixread", "rwmixwrite", "percentage_random", "percentage_sequential",
	"randrepeat", "allrandrepeat", "randseed", "random_distribution", "random_generator", "norandommap",
	"softrandommap", "bs", "blocksize", "bsrange", "blocksize_range", "bssplit", "blocksize_unaligned",
	"bs_unaligned", "bs_is_seq_rand", "blockalign", "ba", "offset", "offset_increment", "offset_align",
	"number_ios", "size", "filesize", "io_size", "io_limit", "nrfiles", "openfiles", "file_service_type",
	"unified_rw_reporting", "zero_buffers", "refill_buffers", "scramble_buffers", "buffer_compress_percentage",
	"buffer_compress_chunk", "buffer_pattern", "dedupe_percentage", "dedupe_mode", "dedupe_working_set_percentage",
	// files, inside the rank's directory (paths checked below)
	"directory", "filename", "filename_format", "unique_filename", "opendir", "fallocate", "fadvise_hint",
	"create_serialize", "create_fsync", "create_on_open", "allow_file_create", "pre_read", "unlink",
	"unlink_each_loop", "file_append", "invalidate", "overwrite",
	// engines (ioengine values are checked below) and their options
	"ioengine", "iodepth", "iodepth_batch", "iodepth_batch_submit", "iodepth_batch_complete",
	"iodepth_batch_complete_min", "iodepth_batch_complete_max", "iodepth_low", "io_submit_mode",
	"serialize_overlap", "direct", "buffered", "atomic", "sync", "fsync", "fdatasync", "sync_file_range",
	"write_barrier", "end_fsync", "fsync_on_close", "hipri", "fixedbufs", "registerfiles", "sqthread_poll",
	"sqthread_poll_cpu", "nonvectored", "force_async", "uncached", "nowait", "userspace_reap", "cmdprio_percentage",
	// rates, latency targets, think time
	"rate", "rate_min", "rate_iops", "rate_iops_min", "rate_process", "rate_ignore_thinktime", "rate_cycle",
	"latency_target", "latency_window", "latency_percentile", "latency_run", "max_latency", "thinktime",
	"thinktime_spin", "thinktime_blocks", "thinktime_blocks_type", "thinktime_iotime",
	// CPU placement and priority of fio's own threads
	"cpus_allowed", "cpus_allowed_policy", "cpumask", "numa_cpu_nodes", "numa_mem_policy", "nice", "prio",
	"prioclass", "gtod_reduce", "gtod_cpu", "clocksource",
	// verification and errors
	"verify", "do_verify", "verify_pattern", "verify_interval", "verify_offset", "verify_fatal", "verify_async",
	"verify_backlog", "verify_backlog_batch", "verify_only", "verify_state_save", "verify_state_load",
	"verify_write_sequence", "verify_header_seed", "continue_on_error", "ignore_error", "error_dump",
	"trim_percentage", "trim_verify_zero", "trim_backlog", "trim_backlog_batch",
	// reporting (log files: plain names, written in the rank's directory)
	"lat_percentiles", "clat_percentiles", "slat_percentiles", "percentile_list", "significant_figures",
	"disable_lat", "disable_clat", "disable_slat", "disable_bw_measurement", "kb_base", "unit_base",
	"per_job_logs", "write_bw_log", "write_lat_log", "write_iops_log", "write_hist_log", "log_avg_msec",
	"log_hist_msec", "log_hist_coarseness", "log_max_value", "log_offset", "log_prio",
)

// fioEngines are the ioengine values allowed: engines that do file I/O
// (or none) in this process. exec, external (a shared object), the network
// engines and the client/server ones are not.
var fioEngines = toSet("sync", "psync", "vsync", "pvsync", "pvsync2", "libaio", "io_uring", "posixaio",
	"mmap", "splice", "null", "falloc", "ftruncate", "filecreate", "filestat", "filedelete", "dircreate",
	"dirstat", "dirdelete", "sg")

// fioLogKeys write files named by their value; fioPathKeys name files to
// do I/O on.
var (
	fioLogKeys  = toSet("write_bw_log", "write_lat_log", "write_iops_log", "write_hist_log")
	fioPathKeys = toSet("directory", "filename", "opendir")
)

// fioFormatTokens are filename_format's own substitutions: each expands to
// a job name (itself checked), a number or a uid — never a path.
var fioFormatTokens = []string{"$jobname", "$jobnum", "$filenum", "$clientuid"}

func toSet(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// FioAllowedOptions lists the options a fio phase accepts, for `prism list`.
func FioAllowedOptions() []string {
	var out []string
	for n := range fioAllowed {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// fioOwnedKeys are what prism sets on fio's command line itself.
var fioOwnedKeys = toSet("output", "output-format", "create_only")

// checkFioOption rejects an option prism does not let fio run with.
func checkFioOption(opt string) error {
	name, val, _ := strings.Cut(strings.TrimSpace(opt), "=")
	name, val = strings.TrimSpace(name), strings.TrimSpace(val)
	switch {
	case name == "":
		return fmt.Errorf("empty option %q", opt)
	case strings.HasPrefix(name, "-"):
		return fmt.Errorf("option %q: write it without dashes (\"bs=4k\"); prism adds them", opt)
	case fioOwnedKeys[name]:
		return fmt.Errorf("option %q: prism sets %s itself", opt, name)
	case name == "include":
		return fmt.Errorf("option %q: include reads another job file, which prism has not checked; put its options in this one", opt)
	case !fioAllowed[name]:
		return fmt.Errorf("option %q: %s is not among the options prism lets fio run with (prism list shows them): prism must not let fio run programs, read or write files outside the run directory, or reconfigure the host", opt, name)
	case strings.Contains(val, "${"):
		return fmt.Errorf("option %q: ${...} would expand the environment into fio's job; write the value itself", opt)
	}
	switch {
	case name == "ioengine":
		if !fioEngines[val] {
			return fmt.Errorf("option %q: ioengine %s is not allowed (allowed: %s)", opt, val, strings.Join(sortedSet(fioEngines), ", "))
		}
	case name == "name":
		if err := checkFioName(val); err != nil {
			return fmt.Errorf("option %q: %v", opt, err)
		}
	case fioLogKeys[name]:
		if strings.ContainsAny(val, "/$") || val == ".." || val == "." {
			return fmt.Errorf("option %q: a log file is a plain name, written in the rank's directory", opt)
		}
	case fioPathKeys[name]:
		// fio separates several file names with ':'.
		for _, part := range strings.Split(val, ":") {
			if err := checkFioPath(part); err != nil {
				return fmt.Errorf("option %q: %v", opt, err)
			}
		}
	case name == "filename_format":
		rest := val
		for _, tok := range fioFormatTokens {
			rest = strings.ReplaceAll(rest, tok, "x")
		}
		if strings.Contains(rest, "$") {
			return fmt.Errorf("option %q: filename_format may use only %s", opt, strings.Join(fioFormatTokens, ", "))
		}
		if err := checkFioPath(rest); err != nil {
			return fmt.Errorf("option %q: %v", opt, err)
		}
	case strings.Contains(val, "$"):
		return fmt.Errorf("option %q: $ expansion is not allowed in fio options run by prism", opt)
	}
	return nil
}

// checkFioName checks a job name: fio uses it in file names ($jobname), so
// it must not be a path.
func checkFioName(n string) error {
	switch {
	case n == "" || n == "." || n == "..":
		return fmt.Errorf("a job name must be a plain name")
	case strings.ContainsAny(n, "/$"):
		return fmt.Errorf("job name %q: fio turns job names into file names, so they must not hold '/' or '$'", n)
	}
	return nil
}

// checkFioPath requires a path relative to fio's working directory (the
// rank's) that stays below it.
func checkFioPath(p string) error {
	clean := filepath.Clean(p)
	if filepath.IsAbs(p) || clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Errorf("prism runs fio inside each rank's directory, so file names must be relative paths below it (fio must not touch files outside the run directory)")
	}
	return nil
}

// fioMaxLine bounds a job file's lines. fio reads a job file with
// fgets into an 8 KiB buffer (OPT_LEN_MAX), so it parses the rest of a
// longer line as a line of its own: "description=<8 KiB of padding>
// exec_prerun=..." is one harmless option here and two for fio. Half
// fio's buffer leaves room for a '\r' and for a fio built with less.
const fioMaxLine = 4095

// checkFioJobFile applies checkFioOption to every option line of an ini
// style job file, and checkFioName to every section ([job]) name.
func checkFioJobFile(b []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) > fioMaxLine {
			return fmt.Errorf("line %d: %d bytes, more than the %d prism accepts: fio splits a long line and parses the rest as another option", n, len(sc.Bytes()), fioMaxLine)
		}
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			sec := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "["), "]"))
			if !strings.HasSuffix(line, "]") || strings.Contains(sec, "${") {
				return fmt.Errorf("line %d: bad section header %q", n, line)
			}
			if sec != "global" {
				if err := checkFioName(sec); err != nil {
					return fmt.Errorf("line %d: %v", n, err)
				}
			}
			continue
		}
		if strings.HasPrefix(line, "include ") || strings.HasPrefix(line, "include\t") {
			return fmt.Errorf("line %d: include reads another job file, which prism has not checked; put its options in this one", n)
		}
		if err := checkFioOption(line); err != nil {
			return fmt.Errorf("line %d: %v", n, err)
		}
	}
	return sc.Err()
}

func sortedSet(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

package report

import (
	"encoding/xml"
	"fmt"
	"io"
)

// WriteJUnit writes m as a JUnit XML report, the format the CI systems of
// HPC centres (Jenkins, GitLab, Bamboo) ingest: one <testsuite> for the run,
// and per phase (per rank count of a sweep) one testcase for its status —
// a failed phase carries a <failure> with its error, an interrupted one an
// <error>, a skipped one <skipped/> — and one testcase per [phase.expect]
// verdict, failed when the limit was missed (a phase failed by its verdicts
// alone counts once per missed threshold, not once more). The classname is the plan
// name; a testcase's time is the phase's wall seconds.
func WriteJUnit(w io.Writer, m *Manifest) error {
	plan := PlanName(m)
	suite := junitSuite{
		Name:      plan,
		ID:        m.RunID,
		Hostname:  m.Host.Hostname,
		Timestamp: m.StartedAt.UTC().Format("2006-01-02T15:04:05"),
		Time:      seconds(m.FinishedAt.Sub(m.StartedAt).Seconds()),
		Properties: []junitProperty{
			{"run_id", m.RunID}, {"status", m.Status}, {"version", m.Version},
			{"comm", fmt.Sprintf("%s, %d ranks on %d hosts", m.Comm.Kind, m.Comm.Ranks, m.Comm.Hosts)},
			{"fs_type", m.Host.FSType}, {"mount_source", m.Host.MountSource}, {"mount_options", m.Host.MountOptions},
			{"workdir", m.Host.Workdir}, {"kernel", m.Host.Kernel}, {"cpu_model", m.Host.CPUModel},
		},
	}
	if m.StartedAt.IsZero() || m.FinishedAt.Before(m.StartedAt) {
		suite.Time = "0"
	}
	if m.Host.MPILibrary != "" {
		suite.Properties = append(suite.Properties, junitProperty{"mpi_library", m.Host.MPILibrary})
	}
	if m.Host.SlurmJobID != "" {
		suite.Properties = append(suite.Properties, junitProperty{"slurm_job_id", m.Host.SlurmJobID})
	}
	count := map[string]int{}
	for _, p := range m.Phases {
		count[p.Name]++
	}
	for _, p := range m.Phases {
		name := p.Name
		if count[p.Name] > 1 { // a sweep: one testcase set per rank count
			name = fmt.Sprintf("%s [%d ranks]", p.Name, p.Ranks)
		}
		tc := junitCase{ClassName: plan, Name: name, Time: seconds(p.WallSeconds)}
		switch {
		case p.Status == StatusFailed && p.ExpectMissed():
			// Failed on its verdicts alone: each missed threshold is its
			// own failing testcase below, so the failures count them.
		case p.Status == StatusFailed:
			msg := "phase failed"
			if p.FailedRank != nil {
				msg = fmt.Sprintf("phase failed on rank %d", *p.FailedRank)
			}
			tc.Failure = &junitFailure{Message: msg, Type: "phase", Text: p.Error}
			suite.Failures++
		case p.Status == StatusInterrupted:
			tc.Error = &junitFailure{Message: "phase interrupted", Type: "interrupted", Text: p.Error}
			suite.Errors++
		case p.Status == StatusSkipped:
			tc.Skipped = &junitSkipped{Message: "not run: an earlier phase failed or the run was interrupted"}
			suite.Skipped++
		}
		tc.SystemOut = fmt.Sprintf("ranks %d, ops %d, bytes %d, errors %d, bytes_per_sec %.6g, ops_per_sec %.6g, latency_ns mean %.0f p50 %d p99 %d max %d, cache %s",
			p.Ranks, p.Ops, p.Bytes, p.Errors, p.BytesPerSec, p.OpsPerSec, p.Latency.Mean, p.Latency.P50, p.Latency.P99, p.Latency.Max, p.Cache.Applied)
		if p.Status == StatusSkipped {
			tc.SystemOut = ""
		}
		suite.Cases = append(suite.Cases, tc)
		for _, v := range p.Expect {
			ec := junitCase{ClassName: plan, Name: fmt.Sprintf("%s expect %s", name, v.Metric), Time: seconds(p.WallSeconds),
				SystemOut: fmt.Sprintf("%s = %s (limit %s)", v.Metric, v.Value, v.Limit)}
			if !v.Passed {
				ec.Failure = &junitFailure{
					Message: fmt.Sprintf("%s %s misses the limit %s", v.Metric, v.Value, v.Limit),
					Type:    "expectation",
					Text:    fmt.Sprintf("phase %s, %d ranks: %s = %s, limit %s", p.Name, p.Ranks, v.Metric, v.Value, v.Limit),
				}
				suite.Failures++
			}
			suite.Cases = append(suite.Cases, ec)
		}
	}
	suite.Tests = len(suite.Cases)
	doc := junitSuites{Name: "prism " + plan, Tests: suite.Tests, Failures: suite.Failures,
		Errors: suite.Errors, Skipped: suite.Skipped, Time: suite.Time, Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("report: junit: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// PlanName returns the plan's name as the manifest records it ("prism"
// when absent).
func PlanName(m *Manifest) string {
	if pm, ok := m.Plan.(map[string]any); ok {
		if s, ok := pm["name"].(string); ok && s != "" {
			return s
		}
	}
	return "prism"
}

func seconds(s float64) string {
	if s <= 0 {
		return "0"
	}
	return fmt.Sprintf("%.6f", s)
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	ID         string          `xml:"id,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Hostname   string          `xml:"hostname,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	ClassName string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Error     *junitFailure `xml:"error,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr,omitempty"`
}

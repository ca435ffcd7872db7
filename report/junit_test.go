package report

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
)

// TestJUnitGolden pins junit.xml for the synthetic acceptance run and checks
// that a JUnit consumer would count what the manifest says.
func TestJUnitGolden(t *testing.T) {
	m := synthManifest(1, 1)
	var b bytes.Buffer
	if err := WriteJUnit(&b, m); err != nil {
		t.Fatal(err)
	}
	golden(t, "junit.golden.xml", b.Bytes())

	var doc struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Skipped  int `xml:"skipped,attr"`
		Suites   []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				ClassName string    `xml:"classname,attr"`
				Name      string    `xml:"name,attr"`
				Time      string    `xml:"time,attr"`
				Failure   *struct{} `xml:"failure"`
				Skipped   *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	// 6 phase results, 7 expectations; failures: move_files, min_iops.
	if len(doc.Suites) != 1 || doc.Suites[0].Name != "acceptance" || doc.Tests != 13 || doc.Failures != 2 || doc.Skipped != 1 {
		t.Fatalf("suites %d name %q tests %d failures %d skipped %d", len(doc.Suites), doc.Suites[0].Name, doc.Tests, doc.Failures, doc.Skipped)
	}
	var failed, skipped []string
	for _, c := range doc.Suites[0].Cases {
		if c.ClassName != "acceptance" || c.Time == "" {
			t.Errorf("case %+v", c)
		}
		if c.Failure != nil {
			failed = append(failed, c.Name)
		}
		if c.Skipped != nil {
			skipped = append(skipped, c.Name)
		}
	}
	if strings.Join(failed, "|") != "list_files expect min_iops|move_files" || strings.Join(skipped, "|") != "delete_files" {
		t.Errorf("failed %q skipped %q", failed, skipped)
	}
	if !strings.Contains(b.String(), `name="create_files [8 ranks] expect p99"`) {
		t.Errorf("sweep testcases are not named by rank count:\n%s", b.String())
	}
}

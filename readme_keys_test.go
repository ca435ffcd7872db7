package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/report"
)

// TestREADMEDocumentsManifestKeys: every JSON key of the manifest
// (report.Manifest and the structs under it) is named in the README's
// Results section, in backquotes, so a key added without its unit and
// meaning fails here.
func TestREADMEDocumentsManifestKeys(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, results, ok := strings.Cut(string(b), "\n## Results\n")
	if !ok {
		t.Fatal("README has no Results section")
	}
	results, _, _ = strings.Cut(results, "\n## ")
	// The key table: its rows name each key with its unit.
	var table strings.Builder
	for _, l := range strings.Split(results, "\n") {
		if strings.HasPrefix(l, "| `") {
			table.WriteString(l + "\n")
		}
	}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type, path string)
	var missing []string
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Ptr || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || typ.PkgPath() != reflect.TypeOf(report.Manifest{}).PkgPath() {
			return
		}
		seen[typ] = true
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			// A word of a row: `bytes`, `host.fs_type`, `per_rank[]`,
			// `.{mean, min, …}`.
			if !regexp.MustCompile(`[` + "`" + `.{ ]` + name + `[` + "`" + `.\[,} ]`).MatchString(table.String()) {
				missing = append(missing, path+name)
			}
			walk(f.Type, path+name+".")
		}
	}
	walk(reflect.TypeOf(report.Manifest{}), "")
	if len(seen) < 10 {
		t.Fatalf("walked %d structs: the walk is broken", len(seen))
	}
	if len(missing) > 0 {
		t.Errorf("manifest keys the README's Results section does not name: %v", missing)
	}
}

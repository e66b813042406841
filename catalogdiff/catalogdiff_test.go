package catalogdiff_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-run/idem/catalogdiff"
)

// update rewrites the want files: go test ./catalogdiff -run Golden -update
var update = flag.Bool("update", false, "rewrite testdata/*/want.txt and want.json")

func readCatalog(t *testing.T, path string) *catalogdiff.Catalog {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := catalogdiff.Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

// TestGolden runs every rule under testdata/: each directory holds
// old.json and new.json and the expected report, want.txt (text) and, for
// some, want.json. A directory's name says what it must find:
//
//	widening.*   at least one widening change
//	narrowing.*  no widening, at least one narrowing change
//	neutral.*    only neutral changes, at least one
//	unchanged.*  no change at all
//
// so that rewriting the want files with -update cannot hide a rule that
// classifies wrongly.
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 60 {
		t.Fatalf("found %d rule directories under testdata/, want every rule", len(dirs))
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		if name == "fuzz" { // the fuzzer's corpus (FuzzDiff)
			continue
		}
		t.Run(name, func(t *testing.T) {
			changes := catalogdiff.Diff(readCatalog(t, filepath.Join(dir, "old.json")), readCatalog(t, filepath.Join(dir, "new.json")))
			report := catalogdiff.NewReport(changes)

			n := report.Counts
			switch prefix, _, _ := strings.Cut(name, "."); prefix {
			case "widening":
				if n.Widening == 0 {
					t.Errorf("no widening change found: %+v", changes)
				}
			case "narrowing":
				if n.Widening != 0 || n.Narrowing == 0 {
					t.Errorf("want narrowing and no widening, got %+v: %+v", n, changes)
				}
			case "neutral":
				if n.Widening != 0 || n.Narrowing != 0 || n.Neutral == 0 {
					t.Errorf("want only neutral changes, got %+v: %+v", n, changes)
				}
			case "unchanged":
				if len(changes) != 0 {
					t.Errorf("want no change, got %+v", changes)
				}
			default:
				t.Fatalf("directory %s: name it widening.*, narrowing.*, neutral.* or unchanged.*", name)
			}
			for _, c := range changes {
				if c.Reason == "" {
					t.Errorf("%s %s: no reason", c.Operation, c.Path)
				}
			}

			var text, js bytes.Buffer
			if err := report.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if err := report.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join(dir, "want.txt"), text.Bytes(), true)
			golden(t, filepath.Join(dir, "want.json"), js.Bytes(), false)
		})
	}
}

// golden compares got with the file at path, or rewrites it with -update.
// A file that is not required is compared (and rewritten) only if present.
func golden(t *testing.T, path string, got []byte, required bool) {
	t.Helper()
	want, err := os.ReadFile(path)
	if os.IsNotExist(err) && !required {
		return
	}
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%v (write it with go test ./catalogdiff -run Golden -update, then review it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (review, then go test ./catalogdiff -run Golden -update):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestParseRefusesWhatIsNotACatalog(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"empty", ``, "not JSON"},
		{"an array", `[]`, "not a catalog: want a JSON object"},
		{"an OpenAPI document", `{"openapi":"3.1.0","paths":{}}`, `no "operations" array`},
		{"operations not an array", `{"operations":{}}`, `"operations" is an object, want an array`},
		{"an entry not an object", `{"operations":[1]}`, "operations[0] is a number"},
		{"an entry without a name", `{"operations":[{"method":"GET"}]}`, `operations[0] has no "name"`},
		{"a duplicate", `{"operations":[],"directCliOperations":[{"name":"x"},{"name":"x"}]}`, `directCliOperations[1]: the name "x" appears twice`},
		{"two documents", `{"operations":[]} {}`, "not one JSON document"},
		{"a retry that is not an object", `{"operations":[{"name":"a","retry":"same_key_replay"}]}`, `operation "a": "retry" is a string, want an object`},
		{"a runtimeRetry that is not an object", `{"operations":[{"name":"a","runtimeRetry":[]}]}`, `operation "a": "runtimeRetry" is an array`},
		{"a direct retry that is not an object", `{"operations":[],"directCliOperations":[{"name":"w","retry":1}]}`, `direct CLI operation "w": "retry" is a number`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := catalogdiff.Parse([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse(%s) = %v, want an error containing %q", c.doc, err, c.want)
			}
		})
	}
	if _, err := catalogdiff.Parse([]byte(`{"operations":[]}`)); err != nil {
		t.Errorf("a catalog without directCliOperations: %v", err)
	}
}

// TestDiffIsDeterministic: the same two catalogs give the same report,
// whatever the order of map iteration.
func TestDiffIsDeterministic(t *testing.T) {
	old := readCatalog(t, "../httpapi/testdata/catalog.golden.json")
	new := readCatalog(t, "../cmd/idem/testdata/catalog.demo.json")
	var first bytes.Buffer
	if err := catalogdiff.NewReport(catalogdiff.Diff(old, new)).WriteJSON(&first); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		var again bytes.Buffer
		catalogdiff.NewReport(catalogdiff.Diff(old, new)).WriteJSON(&again)
		if !bytes.Equal(first.Bytes(), again.Bytes()) {
			t.Fatalf("two diffs of the same catalogs differ:\n%s\n%s", first.Bytes(), again.Bytes())
		}
	}
	if n := catalogdiff.Count(catalogdiff.Diff(old, new)); n.Widening == 0 || n.Narrowing == 0 || n.Neutral == 0 {
		t.Errorf("the test catalog against the demo's: %+v, want changes of every class", n)
	}
}

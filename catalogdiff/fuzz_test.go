package catalogdiff_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/idem-run/idem/catalogdiff"
)

// FuzzDiff: any two documents either fail to parse or diff without a
// panic, deterministically; a catalog against itself has no change.
//
//	go test ./catalogdiff -run '^$' -fuzz FuzzDiff -fuzztime 60s
func FuzzDiff(f *testing.F) {
	dirs, _ := filepath.Glob(filepath.Join("testdata", "*"))
	for _, dir := range dirs {
		old, err1 := os.ReadFile(filepath.Join(dir, "old.json"))
		new, err2 := os.ReadFile(filepath.Join(dir, "new.json"))
		if err1 == nil && err2 == nil {
			f.Add(old, new)
		}
	}
	f.Add([]byte(`{"operations":[{"name":"a","inputSchema":{"properties":{"x":{"type":["integer"]}}}}]}`),
		[]byte(`{"operations":[{"name":"a","inputSchema":{"properties":{"x":{"type":"number","enum":[1,1.0]}}}}]}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		old, err := catalogdiff.Parse(a)
		if err != nil {
			return
		}
		if same := catalogdiff.Diff(old, old); len(same) != 0 {
			t.Fatalf("a catalog against itself: %+v", same)
		}
		new, err := catalogdiff.Parse(b)
		if err != nil {
			return
		}
		var first, again bytes.Buffer
		if err := catalogdiff.NewReport(catalogdiff.Diff(old, new)).WriteJSON(&first); err != nil {
			t.Fatal(err)
		}
		catalogdiff.NewReport(catalogdiff.Diff(old, new)).WriteJSON(&again)
		if !bytes.Equal(first.Bytes(), again.Bytes()) {
			t.Fatalf("two diffs differ:\n%s\n%s", first.Bytes(), again.Bytes())
		}
		for _, c := range catalogdiff.Diff(old, new) {
			if c.Reason == "" || (c.Class != catalogdiff.Widening && c.Class != catalogdiff.Narrowing && c.Class != catalogdiff.Neutral) {
				t.Fatalf("change %+v", c)
			}
		}
	})
}

package idem_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGoSnippetsAreCompiledCode: every ```go block of the README and of
// docs/ is an excerpt of Go code the build compiles (an Example, a test,
// a program under examples/, or the source itself), line for line up to
// indentation and blank lines, so that a snippet a reader copies compiles
// as written. Where a snippet would not compile on its own, the code it
// is taken from shows what surrounds it.
func TestGoSnippetsAreCompiledCode(t *testing.T) {
	var sources [][]string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources = append(sources, codeLines(string(b)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob("docs/*.md")
	checked := 0
	for _, doc := range append([]string{"README.md"}, docs...) {
		for _, s := range goSnippets(t, doc) {
			checked++
			if !excerptOfAny(s.lines, sources) {
				t.Errorf("%s:%d: this go snippet is not compiled code; make it an excerpt of an Example or a program under examples/:\n%s",
					doc, s.line, strings.Join(s.lines, "\n"))
			}
		}
	}
	if checked < 10 {
		t.Fatalf("found %d go snippets; the docs have more: is the parser broken?", checked)
	}
}

type snippet struct {
	line  int
	lines []string
}

// goSnippets are the ```go blocks of a Markdown file.
func goSnippets(t *testing.T, path string) []snippet {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []snippet
	var cur *snippet
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &snippet{line: n}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			if l := strings.TrimSpace(line); l != "" {
				cur.lines = append(cur.lines, l)
			}
		}
	}
	return out
}

// codeLines are the non-blank lines of src, trimmed.
func codeLines(src string) []string {
	var out []string
	for line := range strings.Lines(src) {
		if l := strings.TrimSpace(line); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// excerptOfAny reports whether want is a run of consecutive lines of one
// of sources.
func excerptOfAny(want []string, sources [][]string) bool {
	if len(want) == 0 {
		return true
	}
	for _, src := range sources {
		for i := 0; i+len(want) <= len(src); i++ {
			if src[i] != want[0] {
				continue
			}
			j := 1
			for j < len(want) && src[i+j] == want[j] {
				j++
			}
			if j == len(want) {
				return true
			}
		}
	}
	return false
}

// TestPackageDocNamesEveryPackage: `go doc github.com/idem-run/idem` is
// where a newcomer starts, so the root package's doc names every public
// package (the commands, tests and benchmarks aside).
func TestPackageDocNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	notLibraries := map[string]bool{"cmd": true, "internal": true, "e2e": true, "bench": true, "linearize": true,
		"examples": true, "docs": true, "scripts": true, "testdata": true}
	for _, e := range entries {
		if !e.IsDir() || notLibraries[e.Name()] || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if gos, _ := filepath.Glob(filepath.Join(e.Name(), "*.go")); len(gos) == 0 {
			continue
		}
		if !regexp.MustCompile(`(^|[\s(])` + e.Name() + `[\s,:)]`).Match(doc) {
			t.Errorf("doc.go does not name package %s: say in a few words what it is for", e.Name())
		}
	}
}

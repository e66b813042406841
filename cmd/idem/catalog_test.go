package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The rule directories of the catalogdiff package, used here as inputs.
const (
	widenedDir  = "../../catalogdiff/testdata/widening.kind-same-key-replay-to-no-automatic-retry"
	narrowedDir = "../../catalogdiff/testdata/narrowing.input-property-added"
	demoCatalog = "testdata/catalog.demo.json"
)

// runStdin runs idem with args and stdin.
func runStdin(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	m := Main{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	code = m.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

func TestCatalogDiffExitCodes(t *testing.T) {
	cases := []struct {
		name     string
		old, new string
		code     int
		stdout   []string
	}{
		{"the same catalog", demoCatalog, demoCatalog, 0, []string{"no changes\n"}},
		{"a widening", widenedDir + "/old.json", widenedDir + "/new.json", 1,
			[]string{"widening   gadget.create  retry.kind  \"same_key_replay\" -> \"no_automatic_retry\"", "\n5 widening, 0 narrowing, 0 neutral\n"}},
		{"the way back is a widening too (a key becomes required)", widenedDir + "/new.json", widenedDir + "/old.json", 1,
			[]string{"retry.keyRequired  false -> true"}},
		{"only a narrowing", narrowedDir + "/old.json", narrowedDir + "/new.json", 0,
			[]string{"narrowing  gadget.create  inputSchema.properties.size", "0 widening, 1 narrowing, 0 neutral\n"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, stderr := run(t, nil, "catalog", "diff", c.old, c.new)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, out, stderr)
			}
			for _, want := range c.stdout {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			if stderr != "" {
				t.Errorf("stderr = %q, want nothing (the diff is the output)", stderr)
			}
		})
	}
}

func TestCatalogDiffJSON(t *testing.T) {
	code, out, _ := run(t, nil, "catalog", "diff", "--format", "json", widenedDir+"/old.json", widenedDir+"/new.json")
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, out)
	}
	var got struct {
		Changes []struct {
			Operation, Path, Class, Reason string
			Old, New                       any
		} `json:"changes"`
		Widening, Narrowing, Neutral *int
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got.Widening == nil || *got.Widening != 5 || *got.Narrowing != 0 || *got.Neutral != 0 || len(got.Changes) != 5 {
		t.Fatalf("counts or changes wrong:\n%s", out)
	}
	var kind bool
	for _, c := range got.Changes {
		if c.Operation != "gadget.create" || c.Class != "widening" || c.Reason == "" {
			t.Errorf("change %+v", c)
		}
		if c.Path == "retry.kind" && c.Old == "same_key_replay" && c.New == "no_automatic_retry" {
			kind = true
		}
	}
	if !kind {
		t.Errorf("no retry.kind change in\n%s", out)
	}

	code, out, _ = run(t, nil, "catalog", "diff", demoCatalog, demoCatalog, "--format", "json")
	if code != 0 || out != "{\n  \"changes\": [],\n  \"widening\": 0,\n  \"narrowing\": 0,\n  \"neutral\": 0\n}\n" {
		t.Errorf("no changes as JSON = exit %d\n%s", code, out)
	}
}

// TestCatalogDiffSources: OLD or NEW may be - (stdin) or a URL; a URL
// without a path asks for /v1/operations.
func TestCatalogDiffSources(t *testing.T) {
	oldDoc, err := os.ReadFile(widenedDir + "/old.json")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/operations":
			w.Header().Set("Content-Type", "application/json")
			w.Write(oldDoc)
		case "/huge":
			w.Write(bytes.Repeat([]byte(" "), catalogMaxBytes+1))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	code, out, stderr := run(t, nil, "catalog", "diff", srv.URL, widenedDir+"/new.json")
	if code != 1 || !strings.Contains(out, "5 widening") {
		t.Fatalf("OLD from %s: exit %d\n%s%s", srv.URL, code, out, stderr)
	}
	code, out, _ = run(t, nil, "catalog", "diff", srv.URL+"/v1/operations", widenedDir+"/old.json")
	if code != 0 || out != "no changes\n" {
		t.Fatalf("URL and file of the same catalog: exit %d\n%s", code, out)
	}
	mu.Lock()
	if len(paths) != 2 || paths[0] != "/v1/operations" || paths[1] != "/v1/operations" {
		t.Errorf("paths requested = %v, want /v1/operations twice", paths)
	}
	mu.Unlock()
	code, out, _ = runStdin(t, string(oldDoc), "catalog", "diff", widenedDir+"/new.json", "-")
	if code != 1 || !strings.Contains(out, `"no_automatic_retry" -> "same_key_replay"`) {
		t.Fatalf("NEW from stdin: exit %d\n%s", code, out)
	}

	for _, c := range []struct {
		name   string
		args   []string
		stdin  string
		stderr string
	}{
		{"one argument", []string{widenedDir + "/old.json"}, "", "takes two catalogs"},
		{"three arguments", []string{demoCatalog, demoCatalog, demoCatalog}, "", "takes two catalogs"},
		{"stdin twice", []string{"-", "-"}, "", "only one of OLD and NEW"},
		{"a bad format", []string{"--format", "table", demoCatalog, demoCatalog}, "", "--format must be text or json"},
		{"a missing file", []string{filepath.Join(t.TempDir(), "nope.json"), demoCatalog}, "", "OLD "},
		{"not JSON", []string{demoCatalog, "catalog.go"}, "", "NEW catalog.go: not JSON"},
		{"not a catalog", []string{"-", demoCatalog}, `{"openapi":"3.1.0"}`, `not a catalog: no "operations" array`},
		{"a duplicate name", []string{"-", demoCatalog}, `{"operations":[{"name":"a"},{"name":"a"}]}`, `the name "a" appears twice`},
		{"a 404", []string{srv.URL + "/nope", demoCatalog}, "", "answered 404 Not Found, want 200"},
		{"too large", []string{srv.URL + "/huge", demoCatalog}, "", "larger than 16 MiB"},
		{"too large on stdin", []string{demoCatalog, "-"}, strings.Repeat(" ", catalogMaxBytes+1), "larger than 16 MiB"},
		{"unreachable", []string{"http://127.0.0.1:1/v1/operations", demoCatalog}, "", "GET http://127.0.0.1:1/v1/operations"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, stderr := runStdin(t, c.stdin, append([]string{"catalog", "diff"}, c.args...)...)
			if code != exitUsage || !strings.Contains(stderr, c.stderr) || out != "" {
				t.Errorf("exit %d (want 2), stderr %q (want %q), stdout %q", code, stderr, c.stderr, out)
			}
		})
	}
}

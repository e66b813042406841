package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// completions runs cobra's hidden __complete command, as a shell's
// completion script does, and returns the offered lines (each without
// its description) and the directive line.
func completions(t *testing.T, env map[string]string, args ...string) (choices []string, directive string) {
	t.Helper()
	code, out, stderr := run(t, env, append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("idem __complete %q = exit %d, stderr %q", args, code, stderr)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	directive = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		name, _, _ := strings.Cut(l, "\t")
		choices = append(choices, name)
	}
	return choices, directive
}

func TestCompleteOperationNames(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		t.Errorf("unexpected %s %s", r.Method, r.URL)
	})
	env := map[string]string{"IDEM_SERVER": f.URL}
	for _, tc := range []struct {
		name, toComplete string
		want             []string
	}{
		{"prefix", "bus", []string{"business.create", "business.show"}},
		{"one", "order.r", []string{"order.refund"}},
		{"all", "", []string{"backend.bind", "business.create", "business.show", "order.refund", "order.show"}},
		{"none", "nosuch", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, directive := completions(t, env, "call", tc.toComplete)
			if !slices.Equal(got, tc.want) || directive != ":4" { // 4: ShellCompDirectiveNoFileComp
				t.Fatalf("call %q completes %q, directive %s; want %q, :4", tc.toComplete, got, directive, tc.want)
			}
		})
	}
	// --server on the command line wins over IDEM_SERVER, as for the call.
	got, _ := completions(t, map[string]string{"IDEM_SERVER": "http://127.0.0.1:1"}, "call", "--server", f.URL, "order.")
	if !slices.Equal(got, []string{"order.refund", "order.show"}) {
		t.Fatalf("call --server URL order. completes %q", got)
	}
	// The operation is the only argument.
	if got, _ := completions(t, env, "call", "order.show", ""); len(got) != 0 {
		t.Fatalf("a second argument completes %q, want nothing", got)
	}
}

func TestCompleteOperationDescribesBySummary(t *testing.T) {
	f := newFake(t, nil)
	_, out, _ := run(t, map[string]string{"IDEM_SERVER": f.URL}, "__complete", "call", "business.c")
	if !strings.Contains(out, "business.create\ts\n") {
		t.Fatalf("completion lines %q; want business.create with its summary as description", out)
	}
}

func TestCompleteParamNames(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		t.Errorf("unexpected %s %s", r.Method, r.URL)
	})
	env := map[string]string{"IDEM_SERVER": f.URL}
	const noFileNoSpace = ":6" // ShellCompDirectiveNoSpace | ShellCompDirectiveNoFileComp
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"all inputs", []string{"call", "backend.bind", "--param", ""}, []string{"environment=", "name=", "originUrl=", "slug="}},
		{"shorthand and prefix", []string{"call", "backend.bind", "-p", "o"}, []string{"originUrl="}},
		{"given ones left out", []string{"call", "backend.bind", "--param", "slug=q", "-p", "name=api", "--param", ""}, []string{"environment=", "originUrl="}},
		{"integer input", []string{"call", "order.refund", "--param", "a"}, []string{"amount="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, directive := completions(t, env, tc.args...)
			if !slices.Equal(got, tc.want) || directive != noFileNoSpace {
				t.Fatalf("%q completes %q, directive %s; want %q, %s", tc.args, got, directive, tc.want, noFileNoSpace)
			}
		})
	}
	for _, args := range [][]string{
		{"call", "--param", ""},                        // no operation yet
		{"call", "nosuch.op", "--param", ""},           // not in the catalog
		{"call", "backend.bind", "--param", "slug=qu"}, // a value with no listed values
		{"call", "backend.bind", "--param", "nosuch="}, // not an input
	} {
		if got, directive := completions(t, env, args...); len(got) != 0 || directive != ":4" {
			t.Errorf("%q completes %q, directive %s; want nothing, :4", args, got, directive)
		}
	}
}

func TestCompleteParamValues(t *testing.T) {
	const catalog = `{"operations":[{"name":"deploy.run","method":"POST","path":"/v1/deploys","summary":"s","sideEffect":"write","idempotent":false,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},"retry":{"kind":"convergent","keyRequired":false,"enforcement":"resource_identity","responseSemantics":"current_state","reconcile":null,"rationale":"r","preview":false},"approval":"none","surfaces":["cli","http"],"errors":[],` +
		`"inputSchema":{"type":"object","properties":{"environment":{"type":"string","enum":["preview","production"],"description":"where to deploy"},"force":{"type":"boolean"}}},"outputSchema":{}}],"directCliOperations":[]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(catalog))
	}))
	defer srv.Close()
	env := map[string]string{"IDEM_SERVER": srv.URL}
	for _, tc := range []struct {
		toComplete string
		want       []string
	}{
		{"environment=", []string{"environment=preview", "environment=production"}},
		{"environment=pro", []string{"environment=production"}},
		{"force=", []string{"force=true", "force=false"}},
	} {
		got, directive := completions(t, env, "call", "deploy.run", "--param", tc.toComplete)
		if !slices.Equal(got, tc.want) || directive != ":4" {
			t.Errorf("--param %q completes %q, directive %s; want %q, :4", tc.toComplete, got, directive, tc.want)
		}
	}
	_, out, _ := run(t, env, "__complete", "call", "deploy.run", "--param", "e")
	if !strings.Contains(out, "environment=\tstring: where to deploy\n") {
		t.Errorf("completion lines %q; want environment= described by its type and description", out)
	}
}

// TestCompleteSilentWithoutServer: with no server answering, completion
// offers nothing, prints nothing to stdout but the directive, and ends.
func TestCompleteSilentWithoutServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	for _, server := range []string{srv.URL, "http://127.0.0.1:1", "not a url"} {
		env := map[string]string{"IDEM_SERVER": server}
		for _, args := range [][]string{{"call", "bus"}, {"call", "business.create", "--param", ""}} {
			got, directive := completions(t, env, args...)
			if len(got) != 0 || directive != ":4" {
				t.Errorf("server %q: %q completes %q, directive %s; want nothing, :4", server, args, got, directive)
			}
		}
	}
}

// TestCompleteServerHangs: a server that accepts and never answers costs
// the completion its bound (completionTimeout), then nothing is offered.
func TestCompleteServerHangs(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	old := completionTimeout
	completionTimeout = 50 * time.Millisecond
	defer func() { completionTimeout = old }()
	got, directive := completions(t, map[string]string{"IDEM_SERVER": srv.URL}, "call", "bus")
	if len(got) != 0 || directive != ":4" {
		t.Fatalf("completion against a hanging server offers %q, directive %s; want nothing, :4", got, directive)
	}
}

func TestCompletionCommand(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		code, out, stderr := run(t, nil, "completion", shell)
		if code != 0 || !strings.Contains(out, "__complete") {
			t.Errorf("idem completion %s = exit %d, %d bytes, stderr %q; want a script calling idem __complete", shell, code, len(out), stderr)
		}
	}
}

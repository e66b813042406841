package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idem-run/idem/client"
)

// cliCatalog is a small catalog: one same_key_replay write, its fresh_read
// reconcile, a convergent write with preview and a string-typed body field.
const cliCatalog = `{"operations":[` +
	`{"name":"backend.bind","method":"PUT","path":"/v1/businesses/{slug}/backends/{name}","summary":"s","sideEffect":"write","idempotent":false,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},"retry":{"kind":"convergent","keyRequired":false,"enforcement":"resource_identity","responseSemantics":"current_state","reconcile":"backend.list","rationale":"r","preview":true},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],"inputSchema":{"type":"object","properties":{"slug":{"type":"string","x-idem-in":"path"},"name":{"type":"string","x-idem-in":"path"},"environment":{"type":"string","x-idem-in":"query"},"originUrl":{"type":"string"}}},"outputSchema":{}},` +
	`{"name":"business.create","method":"POST","path":"/v1/businesses","summary":"s","sideEffect":"write","idempotent":false,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},"retry":{"kind":"same_key_replay","keyRequired":true,"enforcement":"idempotency_reservation","responseSemantics":"original_attempt_result","reconcile":"business.show","rationale":"r","preview":false},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],"inputSchema":{"type":"object","properties":{"slug":{"type":"string"},"name":{"type":"string"}}},"outputSchema":{}},` +
	`{"name":"business.show","method":"GET","path":"/v1/businesses/{slug}","summary":"s","sideEffect":"read","idempotent":false,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},"retry":{"kind":"fresh_read","keyRequired":false,"enforcement":"fresh_read","responseSemantics":"current_state","reconcile":null,"rationale":"r","preview":false},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],"inputSchema":{"type":"object","properties":{"slug":{"type":"string","x-idem-in":"path"}}},"outputSchema":{}},` +
	`{"name":"order.refund","method":"POST","path":"/v1/orders/{id}/refund","summary":"s","sideEffect":"write","idempotent":true,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":1,"backoffMs":250},"retry":{"kind":"same_key_replay","keyRequired":true,"enforcement":"idempotency_reservation","responseSemantics":"original_attempt_result","reconcile":"order.show","rationale":"r","preview":false},"approval":"policy","surfaces":["cli","http","mcp"],"errors":[],"inputSchema":{"type":"object","properties":{"id":{"type":"string","x-idem-in":"path"},"amount":{"type":"integer"}}},"outputSchema":{}},` +
	`{"name":"order.show","method":"GET","path":"/v1/orders/{id}","summary":"s","sideEffect":"read","idempotent":false,"timeoutMs":1000,"runtimeRetry":{"maxAttempts":0,"backoffMs":250},"retry":{"kind":"fresh_read","keyRequired":false,"enforcement":"fresh_read","responseSemantics":"current_state","reconcile":null,"rationale":"r","preview":false},"approval":"none","surfaces":["cli","http","mcp"],"errors":[],"inputSchema":{"type":"object","properties":{"id":{"type":"string","x-idem-in":"path"}}},"outputSchema":{}}` +
	`],"directCliOperations":[{"name":"webhook.listen","command":"idem webhook listen","summary":"s","retry":{"kind":"no_automatic_retry","keyRequired":false,"enforcement":"none","responseSemantics":"point_in_time","reconcile":null,"rationale":"r","preview":false}}]}` + "\n"

// fake is a scripted server: the catalog, and answer for everything else.
type fake struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
	bodies   []string
	catalogs int
}

func newFake(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, body string)) *fake {
	t.Helper()
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/operations" {
			f.mu.Lock()
			f.catalogs++
			f.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, cliCatalog)
			return
		}
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, r)
		f.bodies = append(f.bodies, string(b))
		f.mu.Unlock()
		answer(w, r, string(b))
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fake) env(t *testing.T) map[string]string {
	return map[string]string{"IDEM_SERVER": f.URL, "IDEM_TOKEN": "demo-agent", "IDEM_JOURNAL": filepath.Join(t.TempDir(), "journal")}
}

func writeProblem(w http.ResponseWriter, status int, code string, retryable bool, details string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"urn:idem:error:%s","title":"t","status":%d,"detail":"what happened","code":%q,"retryable":%t,"details":%s}`, code, status, code, retryable, details)
}

func writeEnvelope(w http.ResponseWriter, r *http.Request, replayed bool) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(201)
	fmt.Fprintf(w, `{"data":{"slug":"quillby"},"meta":{"operation":"business.create","executionId":"exe_1","attempts":1,"idempotency":{"key":%q,"replayed":%t}}}`, r.Header.Get("Idempotency-Key"), replayed)
}

func TestCallExitCodes(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		code      string
		retryable bool
		details   string
		exit      int
		hint      string
	}{
		{"4xx business error", 409, "BUSINESS_EXISTS", false, `{}`, 1, ""},
		{"key reused", 422, "IDEMPOTENCY_KEY_REUSED", false, `{}`, 1, "new key"},
		{"invalid input", 400, "INVALID_INPUT", false, `{"errors":[]}`, 1, ""},
		{"approval rejected", 403, "APPROVAL_REJECTED", false, `{"approvalId":"apr_1","reason":"no"}`, 1, "rejected"},
		{"policy denied", 403, "POLICY_DENIED", false, `{}`, 1, ""},
		{"in flight after the retries", 409, "IDEMPOTENCY_KEY_IN_FLIGHT", true, `{}`, 3, "still running"},
		{"store unavailable", 503, "STORE_UNAVAILABLE", true, `{}`, 3, "ran nothing"},
		{"rate limited", 429, "RATE_LIMITED", true, `{}`, 3, ""},
		{"indeterminate", 409, "IDEMPOTENCY_RESULT_INDETERMINATE", false, `{"reconcile":"order.show"}`, 4, "Reconcile first: idem call order.show --param id=ord_1"},
		{"expired", 410, "IDEMPOTENCY_RESULT_EXPIRED", false, `{"reconcile":"order.show"}`, 4, "Reconcile first: idem call order.show --param id=ord_1"},
		{"first call 500", 500, "EXECUTION_FAILED", false, `{"reconcile":"order.show"}`, 4, "Reconcile first"},
		{"first call 504", 504, "TIMEOUT", false, `{"reconcile":"order.show"}`, 4, "Reconcile first"},
		{"first call 503 after start", 503, "STORE_UNAVAILABLE", false, `{"reconcile":"order.show"}`, 4, "Reconcile first"},
		{"approval required", 403, "APPROVAL_REQUIRED", false, `{"approvalId":"apr_9"}`, 5, "idem approvals approve apr_9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body string
			f := newFake(t, func(w http.ResponseWriter, r *http.Request, _ string) {
				writeProblem(w, tt.status, tt.code, tt.retryable, tt.details)
			})
			body = fmt.Sprintf(`{"type":"urn:idem:error:%s","title":"t","status":%d,"detail":"what happened","code":%q,"retryable":%t,"details":%s}`, tt.code, tt.status, tt.code, tt.retryable, tt.details)
			code, stdout, stderr := run(t, f.env(t), "call", "order.refund", "--param", "id=ord_1", "--param", "amount=100", "--idempotency-key", "k-1", "--retries", "1", "--retry-timeout", "3s")
			if code != tt.exit {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.exit, stderr)
			}
			if stdout != body+"\n" {
				t.Fatalf("stdout = %q, want the problem object alone", stdout)
			}
			if !strings.HasPrefix(stderr, "Error ["+tt.code+"]: what happened\n") || !strings.Contains(stderr, tt.hint) {
				t.Fatalf("stderr = %q, want Error [%s] and %q", stderr, tt.code, tt.hint)
			}
		})
	}
}

func TestCallSuccessPrintsTheEnvelopeOnly(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		mu.Lock()
		sent = append(sent, r.Method+" "+r.URL.Path+" "+body+" key="+r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		writeEnvelope(w, r, true)
	})
	code, stdout, stderr := run(t, f.env(t), "call", "business.create", "--data", `{"slug":"quillby"}`, "--param", "name=2024", "--idempotency-key", "k-7")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `{"data":{"slug":"quillby"},"meta":{"operation":"business.create","executionId":"exe_1","attempts":1,"idempotency":{"key":"k-7","replayed":true}}}` + "\n"
	if stdout != want {
		t.Fatalf("stdout = %q, want the envelope alone", stdout)
	}
	// name is typed as a string by the schema, so 2024 travels as "2024".
	mu.Lock()
	if len(sent) != 1 || sent[0] != `POST /v1/businesses {"name":"2024","slug":"quillby"} key=k-7` {
		t.Fatalf("sent %v", sent)
	}
	mu.Unlock()
	if !strings.Contains(stderr, "Replayed") || !strings.Contains(stderr, "Current state: idem call business.show --param slug=quillby") {
		t.Fatalf("stderr = %q, want the replay note with the reconcile command", stderr)
	}

	code, stdout, _ = run(t, f.env(t), "call", "business.create", "--data", `{"slug":"quillby","name":"Q"}`, "--idempotency-key", "k-7", "--format", "table")
	if code != 0 || !strings.Contains(stdout, "key") || !strings.Contains(stdout, "k-7 (replayed)") || !strings.Contains(stdout, `"slug": "quillby"`) {
		t.Fatalf("table output (%d):\n%s", code, stdout)
	}
}

func TestCallRefusedIntentsSendNothing(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, _ string) { writeEnvelope(w, r, false) })
	env := f.env(t)
	tests := []struct {
		name string
		args []string
		code string
	}{
		{"key with dry run", []string{"call", "backend.bind", "--param", "slug=a", "--param", "name=api", "--idempotency-key", "k", "--dry-run"}, "IDEMPOTENCY_KEY_NOT_SUPPORTED"},
		{"task with dry run", []string{"call", "backend.bind", "--param", "slug=a", "--param", "name=api", "--task", "t", "--dry-run"}, "IDEMPOTENCY_KEY_NOT_SUPPORTED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(t, env, tt.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want 2: %s", code, stderr)
			}
			var p map[string]any
			if err := json.Unmarshal([]byte(stdout), &p); err != nil || p["code"] != tt.code || p["details"].(map[string]any)["local"] != true {
				t.Fatalf("stdout = %q", stdout)
			}
			if !strings.Contains(stderr, "Nothing was sent") {
				t.Fatalf("stderr = %q", stderr)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) != 0 || f.catalogs != 0 {
		t.Fatalf("refused calls sent %d requests and %d catalog reads", f.count(), f.catalogs)
	}
}

// TestTaskJournalsTheKeyBeforeSending checks, from inside the server, that
// the key of a new task is in the journal when the request arrives; then
// that a re-run re-sends it, and that another intent is refused without a
// request.
func TestTaskJournalsTheKeyBeforeSending(t *testing.T) {
	journal := filepath.Join(t.TempDir(), "state")
	var mu sync.Mutex
	var keys []string
	var inJournal []bool
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, _ string) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		keys = append(keys, key)
		j, err := client.OpenFileJournal(journal)
		e, ok, _ := j.Get("create-quillby")
		inJournal = append(inJournal, err == nil && ok && e.Key == key)
		writeEnvelope(w, r, len(keys) > 1)
	})
	env := map[string]string{"IDEM_SERVER": f.URL, "IDEM_TOKEN": "demo-agent", "IDEM_JOURNAL": journal}
	args := []string{"call", "business.create", "--data", `{"slug":"quillby","name":"Quillby"}`, "--task", "create-quillby"}
	code, _, stderr := run(t, env, args...)
	if code != 0 || !strings.Contains(stderr, "journaled new key") {
		t.Fatalf("first run: exit %d: %s", code, stderr)
	}
	// The same intent, written differently: the same key.
	code, stdout, stderr := run(t, env, "call", "business.create", "--param", "name=Quillby", "--param", "slug=quillby", "--task", "create-quillby")
	if code != 0 || !strings.Contains(stderr, "re-sending its journaled key") || !strings.Contains(stdout, `"replayed":true`) {
		t.Fatalf("second run: exit %d: %s %s", code, stdout, stderr)
	}
	mu.Lock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] || !inJournal[0] || !inJournal[1] {
		t.Fatalf("keys %v, journaled before the request: %v", keys, inJournal)
	}
	firstKey := keys[0]
	mu.Unlock()
	data, err := os.ReadFile(filepath.Join(journal, client.JournalFile))
	if err != nil || strings.Count(string(data), "\n") != 1 || !strings.Contains(string(data), firstKey) {
		t.Fatalf("journal = %q, %v", data, err)
	}
	var e client.Entry
	if err := json.Unmarshal(data, &e); err != nil || e.Task != "create-quillby" || e.Operation != "business.create" || len(e.Fingerprint) != 64 || e.CreatedAt.IsZero() {
		t.Fatalf("journal entry = %+v, %v", e, err)
	}

	// Another intent under the same task: refused, nothing sent.
	before := f.count()
	for _, other := range [][]string{
		{"call", "business.create", "--data", `{"slug":"quillby","name":"Other"}`, "--task", "create-quillby"},
		{"call", "order.refund", "--param", "id=ord_1", "--param", "amount=1", "--task", "create-quillby"},
	} {
		code, stdout, stderr = run(t, env, other...)
		if code != exitUsage || !strings.Contains(stdout, `"code":"IDEMPOTENCY_KEY_REUSED"`) || !strings.Contains(stderr, "Nothing was sent") {
			t.Fatalf("another intent: exit %d: %s %s", code, stdout, stderr)
		}
	}
	if f.count() != before {
		t.Fatal("a refused task sent a request")
	}

	// --task on an operation that takes no key: refused before the call.
	code, stdout, _ = run(t, env, "call", "backend.bind", "--param", "slug=a", "--param", "name=api", "--param", "originUrl=https://x", "--task", "bind")
	if code != exitUsage || !strings.Contains(stdout, "IDEMPOTENCY_KEY_NOT_SUPPORTED") || f.count() != before {
		t.Fatalf("--task on a convergent operation: exit %d, %s", code, stdout)
	}
	if _, ok, _ := mustJournal(t, journal).Get("bind"); ok {
		t.Fatal("a refused task was journaled")
	}
}

func mustJournal(t *testing.T, dir string) *client.FileJournal {
	t.Helper()
	j, err := client.OpenFileJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestTaskNeedsAStateDirectory(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, _ string) { writeEnvelope(w, r, false) })
	code, _, stderr := run(t, map[string]string{"IDEM_SERVER": f.URL}, "call", "business.create", "--param", "slug=a", "--task", "t")
	if code != exitUsage || !strings.Contains(stderr, "IDEM_JOURNAL") || f.count() != 0 {
		t.Fatalf("exit %d, %d requests: %s", code, f.count(), stderr)
	}
}

func TestCallUsageErrors(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, _ string) { writeEnvelope(w, r, false) })
	for _, args := range [][]string{
		{"call"},
		{"call", "a.b", "extra"},
		{"call", "business.create", "--param", "slug"},
		{"call", "business.create", "--param", "=x"},
		{"call", "business.create", "--param", "slug=a", "--param", "slug=b"},
		{"call", "business.create", "--param", "slug=a", "--data", `{"slug":"b"}`},
		{"call", "business.create", "--data", `[1]`},
		{"call", "business.create", "--data", `{"a":1,"a":2}`},
		{"call", "business.create", "--data", `{`},
		{"call", "business.create", "--data", "@/no/such/file"},
		{"call", "business.create", "--idempotency-key", "k", "--task", "t"},
		{"call", "business.create", "--retries", "-1"},
		{"call", "business.create", "--retry-timeout", "0s"},
		{"call", "business.create", "--format", "yaml"},
		{"call", "backend.bind", "--dry-run=1"},
		{"call", "backend.bind", "--dry-run=True"},
		{"call", "backend.bind", "--dry-run=yes"},
		{"call", "backend.bind", "--dry-run="},
		{"call", "backend.bind", "--dry-run", "--dry-run=false"},
		{"call", "business.create", "--server", "localhost:1"},
		{"operations", "list", "--format", "xml"},
		{"approvals", "show"},
	} {
		code, stdout, stderr := run(t, f.env(t), args...)
		if code != exitUsage || stdout != "" {
			t.Errorf("idem %v = exit %d, stdout %q, stderr %q; want exit 2 and nothing on stdout", args, code, stdout, stderr)
		}
	}
	if f.count() != 0 {
		t.Fatalf("usage errors sent %d requests", f.count())
	}
}

func TestCallDataFromFileAndStdin(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, body)
		writeEnvelope(w, r, false)
	})
	file := filepath.Join(t.TempDir(), "data.json")
	os.WriteFile(file, []byte(`{"slug":"s","name":"N"}`), 0o600)
	if code, _, stderr := run(t, f.env(t), "call", "business.create", "--data", "@"+file, "--idempotency-key", "k1"); code != 0 {
		t.Fatalf("@FILE: %d %s", code, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 || bodies[0] != `{"name":"N","slug":"s"}` {
		t.Fatalf("bodies = %v", bodies)
	}
}

func TestParamValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{"100", `100`},
		{"-1.5e3", `-1.5e3`},
		{"true", `true`},
		{"false", `false`},
		{"ord_1", `"ord_1"`},
		{"007", `"007"`},
		{"null", `"null"`},
		{`"123"`, `"123"`},
		{"", `""`},
		{"a b", `"a b"`},
		{"https://x.example/a?b=c", `"https://x.example/a?b=c"`},
		{`{"a":1}`, `"{\"a\":1}"`},
	}
	for _, tt := range tests {
		if got := string(paramValue(tt.in)); got != tt.want {
			t.Errorf("paramValue(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestOperationsListPrintsTheCatalogBytes(t *testing.T) {
	f := newFake(t, nil)
	code, stdout, stderr := run(t, f.env(t), "operations", "list")
	if code != 0 || stdout != cliCatalog || stderr != "" {
		t.Fatalf("exit %d, stdout equal %v, stderr %q", code, stdout == cliCatalog, stderr)
	}
	code, stdout, _ = run(t, f.env(t), "operations", "list", "--format", "table")
	if code != 0 || !strings.Contains(stdout, "order.refund") || !strings.Contains(stdout, "same_key_replay") || !strings.Contains(stdout, "webhook.listen") {
		t.Fatalf("table (%d):\n%s", code, stdout)
	}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Scan()
	if !strings.HasPrefix(sc.Text(), "OPERATION") {
		t.Fatalf("table header = %q", sc.Text())
	}
}

func TestNetworkErrorExitsThree(t *testing.T) {
	f := newFake(t, nil)
	url := f.URL
	f.Close()
	code, stdout, stderr := run(t, map[string]string{"IDEM_SERVER": url}, "call", "business.show", "--param", "slug=a", "--retries", "1", "--retry-timeout", "2s")
	var p map[string]any
	if code != exitTransient || json.Unmarshal([]byte(stdout), &p) != nil || p["code"] != "NETWORK_ERROR" || p["status"] != float64(0) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !strings.HasPrefix(stderr, "Error [NETWORK_ERROR]: ") {
		t.Fatalf("stderr = %q", stderr)
	}
}

func TestIsTerminal(t *testing.T) {
	if isTerminal(io.Discard) {
		t.Fatal("a non-file writer is a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("a regular file is a terminal")
	}
}

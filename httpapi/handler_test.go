package httpapi_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/sqlitestore"
)

// The server under test: a few operations of each contract kind behind a
// real HTTP listener, on a real store.

type widgetIn struct {
	Slug string `json:"slug" in:"path"`
	Name string `json:"name" jsonschema:"minLength=1"`
}

type slugIn struct {
	Slug string `json:"slug" in:"path"`
}

type bindIn struct {
	Slug string `json:"slug" in:"path"`
	Env  string `json:"environment" in:"query"`
	URL  string `json:"url"`
}

type widget struct {
	Slug string `json:"slug"`
	Name string `json:"name,omitempty"`
}

type server struct {
	url     string
	handler http.Handler
	clock   *fakeclock.Clock
	store   idem.Store
	runs    atomic.Int64
	release chan struct{}
	runner  *pipeline.Runner
}

const (
	tokenAgent    = "t-agent"
	tokenAgent2   = "t-agent-2"
	tokenBrowser  = "t-browser"
	tokenApprover = "t-approver"
)

func operations(s *server) []idem.Operation {
	create := idem.Define(idem.Metadata{
		Name: "widget.create", Method: "POST", Path: "/v1/shops/{slug}/widgets", Summary: "Create a widget", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "widget.show", Rationale: "r"}, SuccessStatus: 201, Approval: idem.ApprovalPolicy,
	}, func(ctx context.Context, call *idem.Call, in widgetIn) (widget, error) {
		s.runs.Add(1)
		switch in.Name {
		case "boom":
			return widget{}, io.ErrUnexpectedEOF
		case "slow":
			select {
			case <-s.release:
			case <-ctx.Done():
				return widget{}, ctx.Err()
			}
		}
		call.Header().Set("Location", "/v1/shops/"+in.Slug+"/widgets/"+in.Name)
		call.Header().Set("Set-Cookie", "never=replayed")
		return widget{Slug: in.Slug, Name: in.Name}, nil
	}).WithPolicies(idem.PolicyFor("big", func(ctx context.Context, p idem.Principal, in widgetIn) (idem.PolicyDecision, error) {
		if in.Name == "needs-approval" {
			return idem.PolicyDecision{Effect: idem.RequireApproval, Reason: "big widget"}, nil
		}
		return idem.PolicyDecision{Effect: idem.Allow}, nil
	}))
	show := idem.Define(idem.Metadata{Name: "widget.show", Method: "GET", Path: "/v1/shops/{slug}/widgets", Summary: "Show", SideEffect: idem.SideEffectRead},
		func(ctx context.Context, call *idem.Call, in slugIn) (widget, error) {
			return widget{Slug: in.Slug}, nil
		})
	bind := idem.Define(idem.Metadata{
		Name: "widget.bind", Method: "PUT", Path: "/v1/shops/{slug}/bind", Summary: "Bind", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetryConvergent, Reconcile: "widget.show", Preview: true},
	}, func(ctx context.Context, call *idem.Call, in bindIn) (widget, error) {
		return widget{Slug: in.Slug, Name: in.Env}, nil
	}).
		WithPreview(func(ctx context.Context, call *idem.Call, in bindIn) (any, error) {
			return map[string]string{"would": in.Env}, nil
		})
	mint := idem.Define(idem.Metadata{
		Name: "secret.mint", Method: "POST", Path: "/v1/shops/{slug}/secrets", Summary: "Mint", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Enforcement: idem.EnforceTransactionalSecretReplay, Reconcile: "widget.show"},
	}, func(ctx context.Context, call *idem.Call, in slugIn) (map[string]string, error) {
		return map[string]string{"secret": "sk_" + call.ExecutionID}, nil
	})
	return []idem.Operation{create, show, bind, mint}
}

func startServer(t *testing.T, store func(t *testing.T, clock idem.Clock) idem.Store) *server {
	t.Helper()
	return startServerWith(t, store, pipeline.Config{})
}

// startServerWith is startServer with cfg's admission and tracing fields.
func startServerWith(t *testing.T, store func(t *testing.T, clock idem.Clock) idem.Store, cfg pipeline.Config) *server {
	t.Helper()
	s := &server{clock: fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), release: make(chan struct{})}
	s.store = store(t, s.clock)
	reg, err := idem.NewRegistry(operations(s)...)
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, _ := secretbox.New(key)
	quiet := slog.New(slog.DiscardHandler)
	runner, err := pipeline.New(reg, pipeline.Config{Store: s.store, Clock: s.clock, Sealer: box, Logger: quiet,
		DecodeBudget: cfg.DecodeBudget, MaxExecutions: cfg.MaxExecutions, AdmissionWait: cfg.AdmissionWait, TracerProvider: cfg.TracerProvider})
	if err != nil {
		t.Fatal(err)
	}
	auth := httpapi.NewTokens(map[string]idem.Principal{
		tokenAgent:    {Org: "acme", ID: "agent-1", Kind: idem.KindAgent},
		tokenAgent2:   {Org: "acme", ID: "agent-2", Kind: idem.KindAgent},
		tokenBrowser:  {Org: "acme", ID: "alice", Kind: idem.KindBrowser},
		tokenApprover: {Org: "acme", ID: "bob", Kind: idem.KindCLISession, Roles: []string{idem.RoleApprover}},
	})
	s.runner = runner
	s.handler = httpapi.NewHandler(httpapi.Config{Runner: runner, Store: s.store, Auth: auth, Logger: quiet, Version: "test", MaxBodyBytes: 4096})
	ts := httptest.NewServer(s.handler)
	t.Cleanup(ts.Close)
	s.url = ts.URL
	return s
}

func sqliteStore(t *testing.T, clock idem.Clock) idem.Store {
	s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func postgresStore(t *testing.T, clock idem.Clock) idem.Store {
	s, err := pgstore.Open(t.Context(), pgtest.NewDatabase(t), idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// answer is one HTTP answer, decoded.
type answer struct {
	status int
	header http.Header
	raw    []byte
	body   struct {
		Data      json.RawMessage `json:"data"`
		Code      idem.Code       `json:"code"`
		Title     string          `json:"title"`
		Detail    string          `json:"detail"`
		Status    int             `json:"status"`
		Retryable bool            `json:"retryable"`
		Details   map[string]any  `json:"details"`
		Meta      struct {
			Operation   string `json:"operation"`
			ExecutionID string `json:"executionId"`
			DryRun      bool   `json:"dryRun"`
			Idempotency *struct {
				Key      string `json:"key"`
				Replayed bool   `json:"replayed"`
			} `json:"idempotency"`
		} `json:"meta"`
	}
}

type hdr map[string][]string

func (s *server) send(t *testing.T, method, path, token string, headers hdr, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, vs := range headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	a.raw, _ = io.ReadAll(resp.Body)
	if len(a.raw) > 0 {
		if err := json.Unmarshal(a.raw, &a.body); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, path, a.raw, err)
		}
	}
	return a
}

func (a answer) expect(t *testing.T, status int, code idem.Code) answer {
	t.Helper()
	if a.status != status || a.body.Code != code {
		t.Fatalf("got %d %s, want %d %s: %s", a.status, a.body.Code, status, code, a.raw)
	}
	wantType := "application/json"
	if status >= 400 {
		wantType = "application/problem+json"
		if a.body.Status != status || a.body.Title == "" || a.body.Detail == "" {
			t.Fatalf("problem object incomplete: %s", a.raw)
		}
	}
	if ct := a.header.Get("Content-Type"); ct != wantType {
		t.Fatalf("Content-Type %q, want %q", ct, wantType)
	}
	return a
}

func key(k string) hdr { return hdr{"Idempotency-Key": {k}} }

// TestIdempotencyRows drives every row of SPEC §6.4 over real HTTP, on
// both stores.
func TestIdempotencyRows(t *testing.T) {
	for name, store := range map[string]func(*testing.T, idem.Clock) idem.Store{"sqlite": sqliteStore, "postgres": postgresStore} {
		t.Run(name, func(t *testing.T) { testIdempotencyRows(t, store) })
	}
}

func testIdempotencyRows(t *testing.T, store func(*testing.T, idem.Clock) idem.Store) {
	s := startServer(t, store)
	const create = "/v1/shops/acme/widgets"

	t.Run("completed record, same fingerprint: replay", func(t *testing.T) {
		first := s.send(t, "POST", create, tokenAgent, key("k-replay"), `{"name":"a"}`).expect(t, 201, "")
		again := s.send(t, "POST", create, tokenAgent, key("k-replay"), `{ "name": "a" }`).expect(t, 201, "")
		if again.header.Get("Idempotent-Replayed") != "true" || !again.body.Meta.Idempotency.Replayed || first.body.Meta.Idempotency.Replayed {
			t.Fatalf("replay flags: first %s, again %s %v", first.raw, again.raw, again.header)
		}
		if string(again.body.Data) != string(first.body.Data) || again.body.Meta.ExecutionID != first.body.Meta.ExecutionID {
			t.Fatalf("replay differs: %s vs %s", again.raw, first.raw)
		}
		if again.header.Get("Location") != "/v1/shops/acme/widgets/a" || again.header.Get("Set-Cookie") != "" {
			t.Fatalf("replayed headers = %v", again.header)
		}
		if first.header.Get("Set-Cookie") == "" {
			t.Fatal("the first answer lost the handler's own header")
		}
	})
	t.Run("key on convergent", func(t *testing.T) {
		s.send(t, "PUT", "/v1/shops/acme/bind?environment=preview", tokenAgent, key("k"), `{"url":"x"}`).expect(t, 400, idem.CodeIdempotencyKeyNotSupported)
	})
	t.Run("key with dryRun", func(t *testing.T) {
		s.send(t, "PUT", "/v1/shops/acme/bind?environment=preview&dryRun=true", tokenAgent, key("k"), `{"url":"x"}`).expect(t, 400, idem.CodeIdempotencyKeyNotSupported)
	})
	t.Run("dryRun on preview", func(t *testing.T) {
		a := s.send(t, "PUT", "/v1/shops/acme/bind?environment=preview&dryRun=true", tokenAgent, nil, `{"url":"x"}`).expect(t, 200, "")
		if !a.body.Meta.DryRun {
			t.Fatalf("dry run meta: %s", a.raw)
		}
	})
	t.Run("key on fresh_read executes fresh", func(t *testing.T) {
		s.send(t, "GET", "/v1/shops/acme/widgets", tokenAgent, hdr{"Idempotency-Key": {"not a key", "twice"}}, "").expect(t, 200, "")
	})
	t.Run("dryRun without preview", func(t *testing.T) {
		s.send(t, "POST", create+"?dryRun=true", tokenAgent, nil, `{"name":"a"}`).expect(t, 400, idem.CodeDryRunNotSupported)
	})
	t.Run("no key from an agent", func(t *testing.T) {
		s.send(t, "POST", create, tokenAgent, nil, `{"name":"a"}`).expect(t, 400, idem.CodeIdempotencyKeyRequired)
	})
	t.Run("no key from a browser", func(t *testing.T) {
		s.send(t, "POST", create, tokenBrowser, nil, `{"name":"b"}`).expect(t, 201, "")
	})
	t.Run("malformed key", func(t *testing.T) {
		s.send(t, "POST", create, tokenAgent, key("has space"), `{"name":"a"}`).expect(t, 400, idem.CodeIdempotencyKeyInvalid)
	})
	t.Run("repeated key header", func(t *testing.T) {
		s.send(t, "POST", create, tokenAgent, hdr{"Idempotency-Key": {"a", "a"}}, `{"name":"a"}`).expect(t, 400, idem.CodeIdempotencyKeyInvalid)
	})
	t.Run("sf-string key", func(t *testing.T) {
		s.send(t, "POST", create, tokenAgent, key(`"k-replay"`), `{"name":"a"}`).expect(t, 201, "")
	})
	t.Run("same key, different fingerprint", func(t *testing.T) {
		a := s.send(t, "POST", create, tokenAgent, key("k-replay"), `{"name":"other"}`).expect(t, 422, idem.CodeIdempotencyKeyReused)
		if a.body.Retryable || a.body.Meta.Idempotency == nil || a.body.Meta.Idempotency.Replayed {
			t.Fatalf("422 = %s", a.raw)
		}
		s.send(t, "POST", "/v1/shops/other/widgets", tokenAgent, key("k-replay"), `{"name":"a"}`).expect(t, 422, idem.CodeIdempotencyKeyReused)
	})
	t.Run("keys are scoped per principal", func(t *testing.T) {
		a := s.send(t, "POST", create, tokenAgent2, key("k-replay"), `{"name":"a"}`).expect(t, 201, "")
		if a.body.Meta.Idempotency.Replayed {
			t.Fatal("agent-2 got agent-1's replay")
		}
		s.send(t, "GET", "/v1/attempts/k-replay", tokenAgent2, nil, "").expect(t, 200, "")
	})
	t.Run("in flight, then Prefer: wait", func(t *testing.T) {
		done := make(chan answer, 1)
		go func() { done <- s.send(t, "POST", create, tokenAgent, key("k-slow"), `{"name":"slow"}`) }()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			a := s.send(t, "GET", "/v1/attempts/k-slow", tokenAgent, nil, "")
			if a.status == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the slow request never reserved its key")
			}
		}
		busy := s.send(t, "POST", create, tokenAgent, key("k-slow"), `{"name":"slow"}`).expect(t, 409, idem.CodeIdempotencyKeyInFlight)
		if !busy.body.Retryable || busy.header.Get("Retry-After") == "" {
			t.Fatalf("in flight = %s %v", busy.raw, busy.header)
		}
		// Prefer: wait on a record that stays in flight waits, then answers
		// 409 saying which wait it applied.
		started := time.Now()
		w := s.send(t, "POST", create, tokenAgent, hdr{"Idempotency-Key": {"k-slow"}, "Prefer": {"wait=1"}}, `{"name":"slow"}`).expect(t, 409, idem.CodeIdempotencyKeyInFlight)
		if w.header.Get("Preference-Applied") != "wait=1" || time.Since(started) < time.Second {
			t.Fatalf("Prefer: wait=1 answered after %v with %v", time.Since(started), w.header)
		}
		close(s.release)
		(<-done).expect(t, 201, "")
		r := s.send(t, "POST", create, tokenAgent, hdr{"Idempotency-Key": {"k-slow"}, "Prefer": {"wait=60"}}, `{"name":"slow"}`).expect(t, 201, "")
		if r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("Preference-Applied") != "" {
			t.Fatalf("a wait on a completed record: %v", r.header)
		}
	})
	t.Run("5xx after start is indeterminate", func(t *testing.T) {
		a := s.send(t, "POST", create, tokenAgent, key("k-boom"), `{"name":"boom"}`).expect(t, 500, idem.CodeExecutionFailed)
		if a.body.Retryable || a.body.Details["reconcile"] != "widget.show" {
			t.Fatalf("keyed 500 = %s", a.raw)
		}
		runs := s.runs.Load()
		b := s.send(t, "POST", create, tokenAgent, key("k-boom"), `{"name":"boom"}`).expect(t, 409, idem.CodeIdempotencyResultIndeterminate)
		if b.body.Details["reconcile"] != "widget.show" || b.body.Retryable || s.runs.Load() != runs {
			t.Fatalf("indeterminate = %s", b.raw)
		}
	})
	t.Run("secret past its window", func(t *testing.T) {
		first := s.send(t, "POST", "/v1/shops/acme/secrets", tokenAgent, key("k-mint"), "").expect(t, 200, "")
		again := s.send(t, "POST", "/v1/shops/acme/secrets", tokenAgent, key("k-mint"), "").expect(t, 200, "")
		if string(first.body.Data) != string(again.body.Data) {
			t.Fatal("the secret replay differs")
		}
		s.clock.Advance(15 * time.Minute)
		gone := s.send(t, "POST", "/v1/shops/acme/secrets", tokenAgent, key("k-mint"), "").expect(t, 410, idem.CodeIdempotencyResultExpired)
		if gone.body.Details["reconcile"] != "widget.show" {
			t.Fatalf("410 = %s", gone.raw)
		}
		att := s.send(t, "GET", "/v1/attempts/k-mint", tokenAgent, nil, "").expect(t, 200, "")
		if !strings.Contains(string(att.body.Data), `"state":"expired"`) {
			t.Fatalf("attempt = %s", att.raw)
		}
	})
	t.Run("rejections before the handler never consume the key", func(t *testing.T) {
		s.send(t, "POST", create, tokenAgent, key("k-fresh"), `{"name":""}`).expect(t, 400, idem.CodeInvalidInput)
		s.send(t, "POST", create, tokenAgent, key("k-fresh"), `{"name":"needs-approval"}`).expect(t, 403, idem.CodeApprovalRequired)
		s.send(t, "GET", "/v1/attempts/k-fresh", tokenAgent, nil, "").expect(t, 404, idem.CodeNotFound)
		s.send(t, "POST", create, tokenAgent, key("k-fresh"), `{"name":"fine"}`).expect(t, 201, "")
	})
}

func TestRoutingAuthAndLimits(t *testing.T) {
	s := startServer(t, sqliteStore)
	s.send(t, "GET", "/v1/nowhere", tokenAgent, nil, "").expect(t, 404, idem.CodeNotFound)
	a := s.send(t, "DELETE", "/v1/shops/acme/widgets", tokenAgent, nil, "").expect(t, 405, idem.CodeMethodNotAllowed)
	if a.header.Get("Allow") != "GET, HEAD, POST" {
		t.Fatalf("Allow = %q", a.header.Get("Allow"))
	}
	u := s.send(t, "POST", "/v1/shops/acme/widgets", "", key("k"), `{"name":"a"}`).expect(t, 401, idem.CodeUnauthenticated)
	if u.header.Get("WWW-Authenticate") == "" {
		t.Fatal("401 without WWW-Authenticate")
	}
	s.send(t, "POST", "/v1/shops/acme/widgets", "wrong", key("k"), `{"name":"a"}`).expect(t, 401, idem.CodeUnauthenticated)
	big := `{"name":"` + strings.Repeat("x", 5000) + `"}`
	s.send(t, "POST", "/v1/shops/acme/widgets", tokenAgent, key("k-big"), big).expect(t, 413, idem.CodeRequestTooLarge)
	s.send(t, "GET", "/v1/attempts/k-big", tokenAgent, nil, "").expect(t, 404, idem.CodeNotFound)
	s.send(t, "GET", "/healthz", "", nil, "").expect(t, 200, "")
	s.send(t, "GET", "/readyz", "", nil, "").expect(t, 200, "")
	cat := s.send(t, "GET", "/v1/operations", "", nil, "").expect(t, 200, "")
	if !bytes.Contains(cat.raw, []byte(`"widget.create"`)) {
		t.Fatalf("catalog = %s", cat.raw)
	}
	s.send(t, "GET", "/openapi.json", "", nil, "").expect(t, 200, "")
	// Keys with a slash are percent-encoded in the attempts route.
	s.send(t, "POST", "/v1/shops/acme/widgets", tokenAgent, key("task/1:a"), `{"name":"a"}`).expect(t, 201, "")
	att := s.send(t, "GET", "/v1/attempts/task%2F1:a", tokenAgent, nil, "").expect(t, 200, "")
	if !strings.Contains(string(att.body.Data), `"key":"task/1:a"`) {
		t.Fatalf("attempt = %s", att.raw)
	}
	s.store.Close()
	s.send(t, "GET", "/readyz", "", nil, "").expect(t, 503, idem.CodeStoreUnavailable)
	runs := s.runs.Load()
	out := s.send(t, "POST", "/v1/shops/acme/widgets", tokenAgent, key("k-down"), `{"name":"a"}`).expect(t, 503, idem.CodeStoreUnavailable)
	if !out.body.Retryable || s.runs.Load() != runs {
		t.Fatalf("store down: %s, handler runs %d→%d", out.raw, runs, s.runs.Load())
	}
}

func TestApprovalRoutes(t *testing.T) {
	s := startServer(t, sqliteStore)
	req := s.send(t, "POST", "/v1/shops/acme/widgets", tokenAgent, key("k-a"), `{"name":"needs-approval"}`).expect(t, 403, idem.CodeApprovalRequired)
	id, _ := req.body.Details["approvalId"].(string)
	if id == "" || req.body.Details["reason"] != "big widget" {
		t.Fatalf("APPROVAL_REQUIRED = %s", req.raw)
	}
	list := s.send(t, "GET", "/v1/approvals?status=pending", tokenApprover, nil, "").expect(t, 200, "")
	if !strings.Contains(string(list.body.Data), id) {
		t.Fatalf("pending approvals = %s", list.raw)
	}
	s.send(t, "GET", "/v1/approvals?status=bogus", tokenApprover, nil, "").expect(t, 400, idem.CodeInvalidInput)
	s.send(t, "GET", "/v1/approvals/"+id, tokenAgent2, nil, "").expect(t, 404, idem.CodeApprovalNotFound)
	s.send(t, "POST", "/v1/approvals/"+id+"/approve", tokenBrowser, nil, "").expect(t, 403, idem.CodeForbidden)
	s.send(t, "POST", "/v1/approvals/nope/approve", tokenApprover, nil, "").expect(t, 404, idem.CodeApprovalNotFound)
	for _, body := range []string{`{"reason":1}`, `{"reason":"fine\u0000"}`} {
		bad := s.send(t, "POST", "/v1/approvals/"+id+"/approve", tokenApprover, nil, body).expect(t, 400, idem.CodeInvalidInput)
		if raw := string(bad.raw); strings.Contains(raw, "Go struct") || strings.Contains(raw, "json:") || strings.Contains(raw, "unmarshal") {
			t.Fatalf("decision %s: the message shows Go words: %s", body, raw)
		}
	}
	ok := s.send(t, "POST", "/v1/approvals/"+id+"/approve", tokenApprover, nil, `{"reason":"fine"}`).expect(t, 200, "")
	if !strings.Contains(string(ok.body.Data), `"status":"approved"`) || !strings.Contains(string(ok.body.Data), `"decisionReason":"fine"`) {
		t.Fatalf("approve = %s", ok.raw)
	}
	s.send(t, "POST", "/v1/approvals/"+id+"/approve", tokenApprover, nil, "").expect(t, 200, "")
	s.send(t, "POST", "/v1/approvals/"+id+"/reject", tokenApprover, nil, "").expect(t, 409, idem.CodeApprovalAlreadyDecided)
	ran := s.send(t, "POST", "/v1/shops/acme/widgets", tokenAgent, key("k-a"), `{"name":"needs-approval"}`).expect(t, 201, "")
	exe := s.send(t, "GET", "/v1/executions/"+ran.body.Meta.ExecutionID, tokenAgent, nil, "").expect(t, 200, "")
	for _, want := range []string{`"type":"execution.started"`, `"type":"approval.consumed"`, `"type":"execution.succeeded"`} {
		if !strings.Contains(string(exe.body.Data), want) {
			t.Fatalf("execution = %s, want %s", exe.raw, want)
		}
	}
	s.send(t, "GET", "/v1/executions/"+ran.body.Meta.ExecutionID, tokenAgent2, nil, "").expect(t, 404, idem.CodeNotFound)
	s.send(t, "GET", "/v1/executions/"+ran.body.Meta.ExecutionID, tokenApprover, nil, "").expect(t, 200, "")
}

package demo

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/webhooksig"
)

func TestPlatformContracts(t *testing.T) {
	app := &App{}
	reg, err := idem.NewRegistry(app.platformOperations()...)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path string
		effect             idem.SideEffect
		kind               idem.RetryKind
		enforcement        idem.Enforcement
		semantics          idem.ResponseSemantics
		reconcile          string
		preview            bool
		status             int
	}{
		{"business.create", "POST", "/v1/businesses", idem.SideEffectWrite, idem.RetrySameKeyReplay, idem.EnforceIdempotencyReservation, idem.SemanticsOriginalAttemptResult, "business.show", false, 201},
		{"business.show", "GET", "/v1/businesses/{slug}", idem.SideEffectRead, idem.RetryFreshRead, idem.EnforceFreshRead, idem.SemanticsCurrentState, "", false, 200},
		{"business.list", "GET", "/v1/businesses", idem.SideEffectRead, idem.RetryFreshRead, idem.EnforceFreshRead, idem.SemanticsCurrentState, "", false, 200},
		{"backend.bind", "PUT", "/v1/businesses/{slug}/backends/{name}", idem.SideEffectWrite, idem.RetryConvergent, idem.EnforceResourceIdentity, idem.SemanticsCurrentState, "backend.list", true, 200},
		{"backend.list", "GET", "/v1/businesses/{slug}/backends", idem.SideEffectRead, idem.RetryFreshRead, idem.EnforceFreshRead, idem.SemanticsCurrentState, "", false, 200},
		{"webhook.create", "POST", "/v1/businesses/{slug}/webhooks", idem.SideEffectWrite, idem.RetrySameKeyReplay, idem.EnforceTransactionalSecretReplay, idem.SemanticsOriginalAttemptResult, "webhook.list", false, 201},
		{"webhook.list", "GET", "/v1/businesses/{slug}/webhooks", idem.SideEffectRead, idem.RetryFreshRead, idem.EnforceFreshRead, idem.SemanticsCurrentState, "", false, 200},
		{"webhook.trigger", "POST", "/v1/businesses/{slug}/webhooks/{id}/trigger", idem.SideEffectExternal, idem.RetrySameKeyReplay, idem.EnforceIdempotencyReservation, idem.SemanticsOriginalAttemptResult, "webhook.deliveries", false, 200},
		{"webhook.deliveries", "GET", "/v1/businesses/{slug}/webhooks/{id}/deliveries", idem.SideEffectRead, idem.RetryFreshRead, idem.EnforceFreshRead, idem.SemanticsCurrentState, "", false, 200},
		{"token.mint", "POST", "/v1/tokens", idem.SideEffectWrite, idem.RetrySameKeyReplay, idem.EnforceTransactionalSecretReplay, idem.SemanticsOriginalAttemptResult, "token.list", false, 201},
		{"token.list", "GET", "/v1/tokens", idem.SideEffectRead, idem.RetryFreshRead, idem.EnforceFreshRead, idem.SemanticsCurrentState, "", false, 200},
		{"auth.context_token", "POST", "/v1/auth/context-token", idem.SideEffectWrite, idem.RetryNoAutomaticRetry, idem.EnforceNone, idem.SemanticsPointInTime, "", false, 200},
	}
	if got := len(reg.Names()); got != len(tests) {
		t.Errorf("%d platform operations, want %d: %v", got, len(tests), reg.Names())
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := reg.Describe(tt.name)
			if !ok {
				t.Fatal("not registered")
			}
			r := d.Retry
			if d.Method != tt.method || d.Path != tt.path || d.SideEffect != tt.effect || d.SuccessStatus != tt.status {
				t.Errorf("route %s %s, side effect %s, status %d", d.Method, d.Path, d.SideEffect, d.SuccessStatus)
			}
			if r.Kind != tt.kind || r.Enforcement != tt.enforcement || r.ResponseSemantics != tt.semantics || r.Reconcile != tt.reconcile || r.Preview != tt.preview {
				t.Errorf("retry = %+v", r)
			}
			if d.Summary == "" || r.Rationale == "" {
				t.Error("summary and rationale are required")
			}
			if tt.enforcement == idem.EnforceTransactionalSecretReplay && r.SecretReplayWindowMs != 15*60*1000 {
				t.Errorf("secretReplayWindowMs = %d", r.SecretReplayWindowMs)
			}
		})
	}
}

// createBusiness makes a business in acme and returns its slug.
func createBusiness(t *testing.T, e *testEnv, slug string) {
	t.Helper()
	e.call(t, req{op: "business.create", body: `{"slug":"` + slug + `","name":"Quillby"}`, key: "create-" + slug}).must(t, 201, "")
}

func TestBusinesses(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		body := `{"slug":"quillby","name":"Quillby Ltd"}`
		var b Business
		first := e.call(t, req{op: "business.create", body: body, key: "k-create-1"}).must(t, 201, "")
		first.into(t, &b)
		if b.Slug != "quillby" || b.Name != "Quillby Ltd" || b.CreatedBy != "agent-1" || b.CreatedAt.IsZero() {
			t.Fatalf("created %+v", b)
		}

		// The Location header travels with the answer (and its replays).
		resp := e.runner.Call(context.Background(), idem.Invocation{
			Operation: "business.create",
			Surface:   idem.SurfaceHTTP,
			Principal: Tokens()["demo-agent"],
			Key:       "k-create-1",
			Intent:    idem.Intent{Body: []byte(body)},
		})
		if resp.Status != 201 || resp.Header.Get("Location") != "/v1/businesses/quillby" || !resp.Replayed {
			t.Fatalf("replay: %d %v %s", resp.Status, resp.Header, resp.Body())
		}

		// The same slug under a new key is a stored 409, replayed as 409.
		dup := e.call(t, req{op: "business.create", body: `{"slug":"quillby","name":"Other"}`, key: "k-create-2"}).must(t, 409, CodeBusinessExists)
		if dup.Meta.Idempotency == nil || dup.Meta.Idempotency.Replayed {
			t.Fatalf("first 409: meta %+v", dup.Meta)
		}
		again := e.call(t, req{op: "business.create", body: `{"slug":"quillby","name":"Other"}`, key: "k-create-2"}).must(t, 409, CodeBusinessExists)
		if again.Meta.Idempotency == nil || !again.Meta.Idempotency.Replayed || again.Meta.ExecutionID != dup.Meta.ExecutionID {
			t.Fatalf("replayed 409: meta %+v, first execution %s", again.Meta, dup.Meta.ExecutionID)
		}

		var shown Business
		e.call(t, req{op: "business.show", path: map[string]string{"slug": "quillby"}}).must(t, 200, "").into(t, &shown)
		if shown != b {
			t.Fatalf("show %+v, created %+v", shown, b)
		}
		e.call(t, req{op: "business.show", path: map[string]string{"slug": "nope"}}).must(t, 404, idem.CodeNotFound)

		createBusiness(t, e, "acorn-2")
		var list BusinessList
		e.call(t, req{op: "business.list"}).must(t, 200, "").into(t, &list)
		if len(list.Businesses) != 2 || list.Businesses[0].Slug != "acorn-2" || list.Businesses[1].Slug != "quillby" {
			t.Fatalf("list %+v", list)
		}

		// An agent must send a key.
		e.call(t, req{op: "business.create", body: `{"slug":"nokey","name":"N"}`}).must(t, 400, idem.CodeIdempotencyKeyRequired)
	})
}

func TestBusinessCreateRejectsInvalidSlugs(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		for _, slug := range []string{"", "Quillby", "quill_by", "-quillby", "quillby-", "quill--by", "quill by", strings.Repeat("a", 64)} {
			body, _ := json.Marshal(map[string]string{"slug": slug, "name": "Q"})
			e.call(t, req{op: "business.create", body: string(body), key: "k-bad-slug"}).must(t, 400, idem.CodeInvalidInput)
		}
		e.call(t, req{op: "business.create", body: `{"slug":"ok","name":""}`, key: "k-empty-name"}).must(t, 400, idem.CodeInvalidInput)
		e.call(t, req{op: "business.create", body: `{"slug":"ok"}`, key: "k-no-name"}).must(t, 400, idem.CodeInvalidInput)
		// Nothing was stored: the key is still free for a valid request.
		e.call(t, req{op: "business.create", body: `{"slug":"ok","name":"OK"}`, key: "k-no-name"}).must(t, 201, "")
	})
}

func TestPlatformOrgIsolation(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		createBusiness(t, e, "quillby")
		var w CreatedWebhook
		e.call(t, req{op: "webhook.create", path: map[string]string{"slug": "quillby"}, body: `{"url":"http://127.0.0.1:1/hook","events":["payment.failed"]}`, key: "k-wh"}).must(t, 201, "").into(t, &w)
		e.call(t, req{op: "token.mint", body: `{"name":"ci","scopes":["read"]}`, key: "k-tok"}).must(t, 201, "")

		other := "demo-other-org"
		slug := map[string]string{"slug": "quillby"}
		hook := map[string]string{"slug": "quillby", "id": w.ID}
		e.call(t, req{token: other, op: "business.show", path: slug}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{token: other, op: "backend.list", path: slug}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{token: other, op: "backend.bind", path: map[string]string{"slug": "quillby", "name": "api"}, query: url.Values{"environment": {"preview"}}, body: `{"originUrl":"https://x.example"}`}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{token: other, op: "webhook.list", path: slug}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{token: other, op: "webhook.deliveries", path: hook}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{token: other, op: "webhook.trigger", path: hook, body: `{"type":"payment.failed"}`, key: "k-other"}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{token: other, op: "webhook.create", path: slug, body: `{"url":"http://127.0.0.1:1/hook","events":["payment.failed"]}`, key: "k-other-wh"}).must(t, 404, idem.CodeNotFound)

		var businesses BusinessList
		e.call(t, req{token: other, op: "business.list"}).must(t, 200, "").into(t, &businesses)
		var tokens TokenList
		e.call(t, req{token: other, op: "token.list"}).must(t, 200, "").into(t, &tokens)
		if len(businesses.Businesses) != 0 || len(tokens.Tokens) != 0 {
			t.Fatalf("globex sees acme's rows: %+v %+v", businesses, tokens)
		}
		// The same slug is free in another org.
		e.call(t, req{token: other, op: "business.create", body: `{"slug":"quillby","name":"Globex's"}`, key: "k-create"}).must(t, 201, "")
	})
}

func TestBackendBind(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		createBusiness(t, e, "quillby")
		api := map[string]string{"slug": "quillby", "name": "api"}
		preview := url.Values{"environment": {"preview"}}
		dry := url.Values{"environment": {"preview"}, "dryRun": {"true"}}
		body := `{"originUrl":"https://preview-api.example.com"}`

		listBackends := func() []Backend {
			var l BackendList
			e.call(t, req{op: "backend.list", path: map[string]string{"slug": "quillby"}}).must(t, 200, "").into(t, &l)
			return l.Backends
		}

		// A dry run shows the diff and writes nothing.
		r := e.call(t, req{op: "backend.bind", path: api, query: dry, body: body}).must(t, 200, "")
		if !r.Meta.DryRun {
			t.Fatalf("dry run meta %+v", r.Meta)
		}
		var raw map[string]json.RawMessage
		r.into(t, &raw)
		if string(raw["current"]) != "null" || string(raw["changes"]) != "true" || string(raw["environment"]) != `"preview"` || string(raw["name"]) != `"api"` {
			t.Fatalf("dry run data %s", r.Data)
		}
		var p BackendPreview
		r.into(t, &p)
		if p.Desired.OriginURL != "https://preview-api.example.com" || p.Desired.Environment != "preview" {
			t.Fatalf("desired %+v", p.Desired)
		}
		if got := listBackends(); len(got) != 0 {
			t.Fatalf("dry run wrote %+v", got)
		}

		// The live bind creates the row; list shows it with its environment.
		var b Backend
		e.call(t, req{op: "backend.bind", path: api, query: preview, body: body}).must(t, 200, "").into(t, &b)
		if b.Environment != "preview" || b.OriginURL != "https://preview-api.example.com" || b.Name != "api" || b.UpdatedBy != "agent-1" {
			t.Fatalf("bound %+v", b)
		}
		if got := listBackends(); len(got) != 1 || got[0] != b {
			t.Fatalf("list %+v, bound %+v", got, b)
		}

		// An exact repeat converges: same row, nothing rewritten; a dry run
		// now shows no change.
		var again Backend
		e.call(t, req{op: "backend.bind", path: api, query: preview, body: body}).must(t, 200, "").into(t, &again)
		if again != b {
			t.Fatalf("repeat %+v, first %+v", again, b)
		}
		e.call(t, req{op: "backend.bind", path: api, query: dry, body: body}).must(t, 200, "").into(t, &p)
		if p.Changes || p.Current == nil || *p.Current != b {
			t.Fatalf("dry run after bind %+v", p)
		}

		// Another origin: the dry run shows the change, the bind applies it.
		newBody := `{"originUrl":"https://preview-api-2.example.com"}`
		e.call(t, req{op: "backend.bind", path: api, query: dry, body: newBody}).must(t, 200, "").into(t, &p)
		if !p.Changes || p.Current.OriginURL != "https://preview-api.example.com" {
			t.Fatalf("dry run of a change %+v", p)
		}
		var changed Backend
		e.call(t, req{op: "backend.bind", path: api, query: preview, body: newBody, token: "demo-browser"}).must(t, 200, "").into(t, &changed)
		if changed.OriginURL != "https://preview-api-2.example.com" || !changed.CreatedAt.Equal(b.CreatedAt) || changed.UpdatedBy != "alice" {
			t.Fatalf("changed %+v", changed)
		}

		// Production is a different identity.
		e.call(t, req{op: "backend.bind", path: api, query: url.Values{"environment": {"production"}}, body: `{"originUrl":"https://api.example.com"}`}).must(t, 200, "")
		got := listBackends()
		if len(got) != 2 || got[0].Environment != "preview" || got[1].Environment != "production" || got[1].OriginURL != "https://api.example.com" {
			t.Fatalf("list %+v", got)
		}

		// Contract and input errors.
		e.call(t, req{op: "backend.bind", path: api, query: preview, body: body, key: "k-bind"}).must(t, 400, idem.CodeIdempotencyKeyNotSupported)
		e.call(t, req{op: "backend.bind", path: api, body: body}).must(t, 400, idem.CodeInvalidInput)
		e.call(t, req{op: "backend.bind", path: api, query: url.Values{"environment": {"staging"}}, body: body}).must(t, 400, idem.CodeInvalidInput)
		e.call(t, req{op: "backend.bind", path: api, query: preview, body: `{"originUrl":"ftp://x.example.com"}`}).must(t, 400, idem.CodeInvalidInput)
		e.call(t, req{op: "backend.bind", path: api, query: preview, body: `{"originUrl":"not a url"}`}).must(t, 400, idem.CodeInvalidInput)
		e.call(t, req{op: "backend.bind", path: map[string]string{"slug": "quillby", "name": "API"}, query: preview, body: body}).must(t, 400, idem.CodeInvalidInput)
		unknown := map[string]string{"slug": "nope", "name": "api"}
		e.call(t, req{op: "backend.bind", path: unknown, query: preview, body: body}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "backend.bind", path: unknown, query: dry, body: body}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "backend.list", path: map[string]string{"slug": "nope"}}).must(t, 404, idem.CodeNotFound)
	})
}

func TestWebhookCreateAndList(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		createBusiness(t, e, "quillby")
		slug := map[string]string{"slug": "quillby"}
		body := `{"url":"https://hooks.example.com/idem","events":["payment.succeeded","refund.created"]}`
		first := e.call(t, req{op: "webhook.create", path: slug, body: body, key: "k-wh-1"}).must(t, 201, "")
		var w CreatedWebhook
		first.into(t, &w)
		if !strings.HasPrefix(w.ID, "wh_") || !strings.HasPrefix(w.Secret, "whsec_") || len(w.Secret) != len("whsec_")+43 ||
			w.URL != "https://hooks.example.com/idem" || len(w.Events) != 2 || w.Business != "quillby" {
			t.Fatalf("created %+v", w)
		}

		// A same-key retry replays the exact secret; no second webhook.
		replay := e.call(t, req{op: "webhook.create", path: slug, body: body, key: "k-wh-1"}).must(t, 201, "")
		var w2 CreatedWebhook
		replay.into(t, &w2)
		if replay.Meta.Idempotency == nil || !replay.Meta.Idempotency.Replayed || w2.Secret != w.Secret || w2.ID != w.ID {
			t.Fatalf("replay %s", replay.Raw)
		}

		list := e.call(t, req{op: "webhook.list", path: slug}).must(t, 200, "")
		if strings.Contains(string(list.Data), "secret") || strings.Contains(string(list.Data), w.Secret[6:]) {
			t.Fatalf("webhook.list shows a secret: %s", list.Data)
		}
		var l WebhookList
		list.into(t, &l)
		if len(l.Webhooks) != 1 || l.Webhooks[0].ID != w.ID || len(l.Webhooks[0].Events) != 2 || l.Webhooks[0].Events[1] != "refund.created" {
			t.Fatalf("list %+v", l)
		}

		// The table holds the secret sealed, never in clear.
		var sealed, keyID string
		if err := e.queryRow(t, `SELECT secret_sealed, secret_key_id FROM idem_demo_webhooks WHERE org = ? AND id = ?`, []any{"acme", w.ID}, &sealed, &keyID); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(sealed, w.Secret[6:]) || keyID == "" {
			t.Fatalf("stored secret %q (key %q)", sealed, keyID)
		}

		for name, bad := range map[string]string{
			"no events":        `{"url":"https://hooks.example.com/idem","events":[]}`,
			"unknown event":    `{"url":"https://hooks.example.com/idem","events":["payment.refunded"]}`,
			"repeated event":   `{"url":"https://hooks.example.com/idem","events":["payment.failed","payment.failed"]}`,
			"events missing":   `{"url":"https://hooks.example.com/idem"}`,
			"not http":         `{"url":"ftp://hooks.example.com/idem","events":["payment.failed"]}`,
			"not a URL":        `{"url":"hooks","events":["payment.failed"]}`,
			"unknown property": `{"url":"https://hooks.example.com/idem","events":["payment.failed"],"secret":"mine"}`,
		} {
			t.Run(name, func(t *testing.T) {
				e.call(t, req{op: "webhook.create", path: slug, body: bad, key: "k-bad"}).must(t, 400, idem.CodeInvalidInput)
			})
		}
		e.call(t, req{op: "webhook.create", path: map[string]string{"slug": "nope"}, body: body, key: "k-wh-2"}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "webhook.list", path: map[string]string{"slug": "nope"}}).must(t, 404, idem.CodeNotFound)
	})
}

// receiver is a webhook endpoint that keeps what it receives.
type receiver struct {
	srv    *httptest.Server
	status int

	mu         sync.Mutex
	deliveries []receivedDelivery
}

type receivedDelivery struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, status int) *receiver {
	r := &receiver{status: status}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.deliveries = append(r.deliveries, receivedDelivery{header: req.Header.Clone(), body: body})
		r.mu.Unlock()
		w.WriteHeader(r.status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) received() []receivedDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedDelivery(nil), r.deliveries...)
}

// createWebhook makes a webhook of business quillby pointing at u.
func createWebhook(t *testing.T, e *testEnv, u string) CreatedWebhook {
	t.Helper()
	var w CreatedWebhook
	e.call(t, req{op: "webhook.create", path: map[string]string{"slug": "quillby"},
		body: `{"url":"` + u + `","events":["payment.failed"]}`, key: "k-wh-" + u}).must(t, 201, "").into(t, &w)
	return w
}

func TestWebhookTrigger(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		rcv := newReceiver(t, http.StatusNoContent)
		createBusiness(t, e, "quillby")
		w := createWebhook(t, e, rcv.srv.URL+"/hooks")
		hook := map[string]string{"slug": "quillby", "id": w.ID}

		before := time.Now()
		first := e.call(t, req{op: "webhook.trigger", path: hook, body: `{"type":"payment.failed"}`, key: "k-trigger-1"}).must(t, 200, "")
		retry := e.call(t, req{op: "webhook.trigger", path: hook, body: `{"type":"payment.failed"}`, key: "k-trigger-1"}).must(t, 200, "")
		if retry.Meta.Idempotency == nil || !retry.Meta.Idempotency.Replayed || string(retry.Data) != string(first.Data) {
			t.Fatalf("retry %s, first %s", retry.Raw, first.Raw)
		}
		var d Delivery
		first.into(t, &d)
		if !strings.HasPrefix(d.ID, "dlv_") || d.WebhookID != w.ID || d.Type != "payment.failed" || d.Outcome != "delivered" ||
			!d.Delivered || d.ResponseStatus != 204 || d.Error != "" || d.ExecutionID != first.Meta.ExecutionID {
			t.Fatalf("delivery %+v", d)
		}

		// Exactly one delivery reached the receiver, signed with the secret
		// webhook.create returned.
		got := rcv.received()
		if len(got) != 1 {
			t.Fatalf("receiver got %d deliveries, want 1", len(got))
		}
		h := got[0].header
		if err := webhooksig.Verify(w.Secret, h.Get("Idem-Signature"), got[0].body, time.Now(), 5*time.Minute); err != nil {
			t.Fatalf("signature %q: %v", h.Get("Idem-Signature"), err)
		}
		if err := webhooksig.Verify("whsec_wrong", h.Get("Idem-Signature"), got[0].body, time.Now(), 5*time.Minute); err == nil {
			t.Fatal("a wrong secret verifies")
		}
		if h.Get("Idem-Delivery-Id") != d.ID || h.Get("Idem-Event-Type") != "payment.failed" || h.Get("Content-Type") != "application/json" {
			t.Fatalf("headers %v", h)
		}
		var ev struct {
			ID        string          `json:"id"`
			Type      string          `json:"type"`
			CreatedAt time.Time       `json:"createdAt"`
			Data      json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(got[0].body, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.ID != d.ID || ev.Type != "payment.failed" || ev.CreatedAt.Before(before.Add(-time.Second)) || len(ev.Data) == 0 {
			t.Fatalf("body %s", got[0].body)
		}

		// Another key is another delivery, with another id.
		var d2 Delivery
		e.call(t, req{op: "webhook.trigger", path: hook, body: `{"type":"payment.failed"}`, key: "k-trigger-2"}).must(t, 200, "").into(t, &d2)
		if d2.ID == d.ID || len(rcv.received()) != 2 {
			t.Fatalf("second delivery %+v, receiver got %d", d2, len(rcv.received()))
		}

		var l DeliveryList
		e.call(t, req{op: "webhook.deliveries", path: hook}).must(t, 200, "").into(t, &l)
		if len(l.Deliveries) != 2 || l.Deliveries[0].ID != d.ID || l.Deliveries[1].ID != d2.ID || !l.Deliveries[0].Delivered || l.Deliveries[0].ResponseStatus != 204 {
			t.Fatalf("deliveries %+v", l)
		}

		// Errors.
		e.call(t, req{op: "webhook.trigger", path: hook, body: `{"type":"payment.exploded"}`, key: "k-trigger-bad"}).must(t, 400, idem.CodeInvalidInput)
		e.call(t, req{op: "webhook.trigger", path: map[string]string{"slug": "quillby", "id": "wh_nope"}, body: `{"type":"payment.failed"}`, key: "k-trigger-3"}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "webhook.trigger", path: map[string]string{"slug": "nope", "id": w.ID}, body: `{"type":"payment.failed"}`, key: "k-trigger-4"}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "webhook.trigger", path: hook, body: `{"type":"payment.failed"}`}).must(t, 400, idem.CodeIdempotencyKeyRequired)
		e.call(t, req{op: "webhook.deliveries", path: map[string]string{"slug": "quillby", "id": "wh_nope"}}).must(t, 404, idem.CodeNotFound)
		if n := len(rcv.received()); n != 2 {
			t.Fatalf("receiver got %d deliveries after the errors, want 2", n)
		}
	})
}

func TestWebhookTriggerReceiverFailure(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		rcv := newReceiver(t, http.StatusInternalServerError)
		createBusiness(t, e, "quillby")
		w := createWebhook(t, e, rcv.srv.URL)
		hook := map[string]string{"slug": "quillby", "id": w.ID}

		// The attempt happened: 200, delivered false, the receiver's status.
		var d Delivery
		e.call(t, req{op: "webhook.trigger", path: hook, body: `{"type":"payment.failed"}`, key: "k-1"}).must(t, 200, "").into(t, &d)
		if d.Delivered || d.Outcome != "failed" || d.ResponseStatus != 500 || d.Error != "" {
			t.Fatalf("delivery %+v", d)
		}
		// A same-key retry replays that outcome; it does not send again.
		var again Delivery
		e.call(t, req{op: "webhook.trigger", path: hook, body: `{"type":"payment.failed"}`, key: "k-1"}).must(t, 200, "").into(t, &again)
		if again != d || len(rcv.received()) != 1 {
			t.Fatalf("replay %+v, receiver got %d", again, len(rcv.received()))
		}

		// A receiver nobody listens on: no answer, an error recorded.
		rcv.srv.Close()
		var none Delivery
		e.call(t, req{op: "webhook.trigger", path: hook, body: `{"type":"payment.failed"}`, key: "k-2"}).must(t, 200, "").into(t, &none)
		if none.Delivered || none.Outcome != "failed" || none.ResponseStatus != 0 || none.Error == "" {
			t.Fatalf("delivery to a closed receiver %+v", none)
		}
		var l DeliveryList
		e.call(t, req{op: "webhook.deliveries", path: hook}).must(t, 200, "").into(t, &l)
		if len(l.Deliveries) != 2 || l.Deliveries[1] != none {
			t.Fatalf("deliveries %+v", l)
		}
	})
}

func TestWebhookTriggerReceiverTimeout(t *testing.T) {
	for name, storeURL := range stores {
		t.Run(name, func(t *testing.T) {
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(release) })
			e := newTestEnv(t, storeURL(t), Config{HTTPClient: &http.Client{Timeout: 100 * time.Millisecond}, WebhookLoopback: true})
			createBusiness(t, e, "quillby")
			w := createWebhook(t, e, srv.URL)
			var d Delivery
			e.call(t, req{op: "webhook.trigger", path: map[string]string{"slug": "quillby", "id": w.ID}, body: `{"type":"refund.created"}`, key: "k-1"}).must(t, 200, "").into(t, &d)
			if d.Delivered || d.Outcome != "failed" || d.ResponseStatus != 0 || !strings.Contains(d.Error, "Timeout") {
				t.Fatalf("delivery %+v", d)
			}
		})
	}
}

func TestTokens(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		body := `{"name":"ci","scopes":["read","write"]}`
		first := e.call(t, req{op: "token.mint", body: body, key: "k-mint-1"}).must(t, 201, "")
		var tok MintedToken
		first.into(t, &tok)
		if !strings.HasPrefix(tok.ID, "tok_") || !strings.HasPrefix(tok.Secret, "idem_") || tok.Name != "ci" || len(tok.Scopes) != 2 || tok.CreatedBy != "agent-1" {
			t.Fatalf("minted %+v", tok)
		}
		replay := e.call(t, req{op: "token.mint", body: body, key: "k-mint-1"}).must(t, 201, "")
		var tok2 MintedToken
		replay.into(t, &tok2)
		if !replay.Meta.Idempotency.Replayed || tok2.Secret != tok.Secret || tok2.ID != tok.ID {
			t.Fatalf("replay %s", replay.Raw)
		}
		var other MintedToken
		e.call(t, req{op: "token.mint", body: `{"name":"deploy","scopes":["admin"]}`, key: "k-mint-2"}).must(t, 201, "").into(t, &other)
		if other.Secret == tok.Secret {
			t.Fatal("two mints, one secret")
		}

		list := e.call(t, req{op: "token.list"}).must(t, 200, "")
		if strings.Contains(string(list.Data), "secret") || strings.Contains(string(list.Data), tok.Secret) {
			t.Fatalf("token.list shows a secret: %s", list.Data)
		}
		var l TokenList
		list.into(t, &l)
		if len(l.Tokens) != 2 {
			t.Fatalf("list %+v", l)
		}
		ids := map[string]Token{l.Tokens[0].ID: l.Tokens[0], l.Tokens[1].ID: l.Tokens[1]}
		if got := ids[tok.ID]; got.Name != "ci" || len(got.Scopes) != 2 || got.Scopes[1] != "write" {
			t.Fatalf("listed %+v", got)
		}

		// Only the hash is stored.
		var hash string
		if err := e.queryRow(t, `SELECT secret_sha256 FROM idem_demo_tokens WHERE org = ? AND id = ?`, []any{"acme", tok.ID}, &hash); err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256([]byte(tok.Secret)); hash != hex.EncodeToString(sum[:]) {
			t.Fatalf("stored %q, want the SHA-256 of the token", hash)
		}

		for name, bad := range map[string]string{
			"no scopes":       `{"name":"x","scopes":[]}`,
			"unknown scope":   `{"name":"x","scopes":["root"]}`,
			"repeated scope":  `{"name":"x","scopes":["read","read"]}`,
			"no name":         `{"scopes":["read"]}`,
			"empty name":      `{"name":"","scopes":["read"]}`,
			"scopes a string": `{"name":"x","scopes":"read"}`,
		} {
			t.Run(name, func(t *testing.T) {
				e.call(t, req{op: "token.mint", body: bad, key: "k-bad"}).must(t, 400, idem.CodeInvalidInput)
			})
		}
	})
}

func TestContextToken(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		var a, b ContextToken
		e.call(t, req{op: "auth.context_token"}).must(t, 200, "").into(t, &a)
		e.call(t, req{op: "auth.context_token", body: `{}`}).must(t, 200, "").into(t, &b)
		if !strings.HasPrefix(a.Token, "ctx_") || a.Token == b.Token || a.Org != "acme" || a.Principal != "agent-1" {
			t.Fatalf("tokens %+v %+v", a, b)
		}
		if d := a.ExpiresAt.Sub(a.IssuedAt); d != 5*time.Minute {
			t.Fatalf("lifetime %s", d)
		}
		r := e.call(t, req{op: "auth.context_token", key: "k-ctx"}).must(t, 400, idem.CodeIdempotencyKeyNotSupported)
		if r.Meta.Idempotency != nil {
			t.Fatalf("a refused key is echoed: %s", r.Raw)
		}
		e.call(t, req{op: "auth.context_token", query: url.Values{"dryRun": {"true"}}}).must(t, 400, idem.CodeDryRunNotSupported)
	})
}

func TestWebhookTriggerWithoutItsSealingKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		rcv := newReceiver(t, http.StatusOK)
		createBusiness(t, e, "quillby")
		w := createWebhook(t, e, rcv.srv.URL)
		hook := map[string]string{"slug": "quillby", "id": w.ID}

		// The key that sealed the webhook's secret is gone (rotated out).
		key := make([]byte, secretbox.KeySize)
		_, _ = rand.Read(key)
		e.app.sealer, _ = secretbox.New(key)

		e.call(t, req{op: "webhook.trigger", path: hook, body: `{"type":"payment.failed"}`, key: "k-1"}).must(t, 500, idem.CodeExecutionFailed)
		e.call(t, req{op: "webhook.trigger", path: hook, body: `{"type":"payment.failed"}`, key: "k-1"}).must(t, 409, idem.CodeIdempotencyResultIndeterminate)
		var l DeliveryList
		e.call(t, req{op: "webhook.deliveries", path: hook}).must(t, 200, "").into(t, &l)
		if len(rcv.received()) != 0 || len(l.Deliveries) != 0 {
			t.Fatalf("sent %d, recorded %+v; want nothing", len(rcv.received()), l)
		}
	})
}

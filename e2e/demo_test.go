package e2e

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-run/idem/internal/pgtest"
)

// stores starts a demo server on each store kind.
var stores = map[string]func(t *testing.T, dir string) string{
	"sqlite":   func(t *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, "idem.db") },
	"postgres": func(t *testing.T, dir string) string { return pgtest.NewDatabase(t) },
}

// TestAgentProcedure runs the agent procedure of seed 003 for every retry
// contract kind against `idem serve --demo`, on SQLite and PostgreSQL.
func TestAgentProcedure(t *testing.T) {
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := serve(t, store(t, dir), dir)
			t.Run("catalog", func(t *testing.T) { testCatalogContracts(t, s) })
			t.Run("same_key_replay", func(t *testing.T) { testSameKeyReplay(t, s) })
			t.Run("convergent with preview", func(t *testing.T) { testConvergentPreview(t, s) })
			t.Run("convergent by resource identity", func(t *testing.T) { testLimitIdentity(t, s) })
			t.Run("secret replay", func(t *testing.T) { testSecretMint(t, s) })
			t.Run("intrinsic_replay", func(t *testing.T) { testIntrinsicReplay(t, s) })
			t.Run("no_automatic_retry", func(t *testing.T) { testNoAutomaticRetry(t, s) })
			t.Run("preview route", func(t *testing.T) { testPreviewRoute(t, s) })
			t.Run("approval", func(t *testing.T) { testApproval(t, s) })
		})
	}
}

// catalogRetry returns an operation's retry object from the catalog.
func catalogRetry(t *testing.T, s *server, name string) map[string]any {
	t.Helper()
	cat := s.do(t, "GET", "/v1/operations", "", "").want(t, 200, "")
	for _, op := range cat.body["operations"].([]any) {
		m := op.(map[string]any)
		if m["name"] == name {
			return m["retry"].(map[string]any)
		}
	}
	t.Fatalf("operation %s is not in the catalog", name)
	return nil
}

func testCatalogContracts(t *testing.T, s *server) {
	want := map[string]string{
		"business.create": "same_key_replay", "business.show": "fresh_read", "business.list": "fresh_read",
		"backend.bind": "convergent", "backend.list": "fresh_read",
		"webhook.create": "same_key_replay", "webhook.list": "fresh_read", "webhook.trigger": "same_key_replay", "webhook.deliveries": "fresh_read",
		"token.mint": "same_key_replay", "token.list": "fresh_read", "auth.context_token": "no_automatic_retry",
		"limit.create": "convergent", "limit.update": "convergent", "limit.list": "fresh_read",
		"order.show": "fresh_read", "order.refund": "same_key_replay",
		"serviceaccount.approve": "intrinsic_replay", "serviceaccount.show": "fresh_read",
		"agreement.preview": "preview", "agreement.create": "same_key_replay", "agreement.list": "fresh_read",
	}
	for name, kind := range want {
		if got := catalogRetry(t, s, name)["kind"]; got != kind {
			t.Errorf("%s: retry.kind = %v, want %s", name, got, kind)
		}
	}
	if r := catalogRetry(t, s, "token.mint"); r["enforcement"] != "transactional_secret_replay" || r["secretReplayWindowMs"] != float64(900000) {
		t.Errorf("token.mint retry = %v", r)
	}
	if r := catalogRetry(t, s, "backend.bind"); r["preview"] != true || r["reconcile"] != "backend.list" {
		t.Errorf("backend.bind retry = %v", r)
	}
	cat := s.do(t, "GET", "/v1/operations", "", "")
	direct, _ := cat.body["directCliOperations"].([]any)
	if len(direct) == 0 || direct[0].(map[string]any)["name"] != "webhook.listen" {
		t.Errorf("directCliOperations = %v", cat.body["directCliOperations"])
	}
}

func testSameKeyReplay(t *testing.T, s *server) {
	r := catalogRetry(t, s, "business.create")
	if r["keyRequired"] != true || r["reconcile"] != "business.show" {
		t.Fatalf("business.create retry = %v", r)
	}
	body := `{"slug":"quillby","name":"Quillby"}`
	s.do(t, "POST", "/v1/businesses", "demo-agent", body).want(t, 400, "IDEMPOTENCY_KEY_REQUIRED")
	first := s.do(t, "POST", "/v1/businesses", "demo-agent", body, "Idempotency-Key", "create-quillby").want(t, 201, "")
	// The answer was lost: resend the byte-equivalent intent with the same key.
	again := s.do(t, "POST", "/v1/businesses", "demo-agent", `{"name":"Quillby","slug":"quillby"}`, "Idempotency-Key", "create-quillby").want(t, 201, "")
	if again.header.Get("Idempotent-Replayed") != "true" || again.get("meta.idempotency.replayed") != true || first.get("meta.idempotency.replayed") != false {
		t.Fatalf("replay: %s / %s", first.raw, again.raw)
	}
	if again.get("meta.executionId") != first.get("meta.executionId") {
		t.Fatal("the replay names another execution")
	}
	s.do(t, "POST", "/v1/businesses", "demo-agent", `{"slug":"quillby","name":"Other"}`, "Idempotency-Key", "create-quillby").want(t, 422, "IDEMPOTENCY_KEY_REUSED")
	// A new key for the same slug is a new intent, refused by the business rule.
	dup := s.do(t, "POST", "/v1/businesses", "demo-agent", body, "Idempotency-Key", "create-quillby-2").want(t, 409, "BUSINESS_EXISTS")
	s.do(t, "POST", "/v1/businesses", "demo-agent", body, "Idempotency-Key", "create-quillby-2").want(t, 409, "BUSINESS_EXISTS")
	_ = dup
	// Reconcile before reporting state.
	s.do(t, "GET", "/v1/businesses/quillby", "demo-agent", "").want(t, 200, "")
	s.do(t, "GET", "/v1/businesses/quillby", "demo-other-org", "").want(t, 404, "NOT_FOUND")
}

func testConvergentPreview(t *testing.T, s *server) {
	s.do(t, "POST", "/v1/businesses", "demo-agent", `{"slug":"bindco","name":"Bind Co"}`, "Idempotency-Key", "create-bindco").want(t, 201, "")
	path := "/v1/businesses/bindco/backends/api?environment=preview"
	body := `{"originUrl":"https://preview-api.example.com"}`
	s.do(t, "PUT", path+"&dryRun=true", "demo-agent", body, "Idempotency-Key", "k").want(t, 400, "IDEMPOTENCY_KEY_NOT_SUPPORTED")
	dry := s.do(t, "PUT", path+"&dryRun=true", "demo-agent", body).want(t, 200, "")
	if dry.get("meta.dryRun") != true {
		t.Fatalf("dry run = %s", dry.raw)
	}
	list := s.do(t, "GET", "/v1/businesses/bindco/backends", "demo-agent", "").want(t, 200, "")
	if strings.Contains(string(list.raw), "preview-api.example.com") {
		t.Fatal("the dry run bound the backend")
	}
	s.do(t, "PUT", path, "demo-agent", body, "Idempotency-Key", "k").want(t, 400, "IDEMPOTENCY_KEY_NOT_SUPPORTED")
	s.do(t, "PUT", path, "demo-agent", body).want(t, 200, "")
	s.do(t, "PUT", path, "demo-agent", body).want(t, 200, "") // converges
	list = s.do(t, "GET", "/v1/businesses/bindco/backends", "demo-agent", "").want(t, 200, "")
	if !strings.Contains(string(list.raw), "preview-api.example.com") {
		t.Fatalf("backends after bind = %s", list.raw)
	}
}

func testLimitIdentity(t *testing.T, s *server) {
	path := "/v1/subscriptions/sub_1/limits"
	s.do(t, "POST", path, "demo-agent", `{"subject":"api-calls","quantity":100}`, "Idempotency-Key", "k").want(t, 400, "IDEMPOTENCY_KEY_NOT_SUPPORTED")
	created := s.do(t, "POST", path, "demo-agent", `{"subject":"api-calls","quantity":100}`).want(t, 201, "")
	s.do(t, "POST", path, "demo-agent", `{"subject":"api-calls","quantity":100}`).want(t, 200, "")
	conflict := s.do(t, "POST", path, "demo-agent", `{"subject":"api-calls","quantity":200}`).want(t, 409, "LIMIT_CONFLICT")
	if conflict.get("details.current") == nil {
		t.Fatalf("409 without details.current: %s", conflict.raw)
	}
	id, _ := created.get("data.id").(string)
	if id == "" {
		t.Fatalf("limit without id: %s", created.raw)
	}
	s.do(t, "PUT", "/v1/limits/"+id, "demo-agent", `{"quantity":150}`).want(t, 200, "")
	s.do(t, "POST", path, "demo-agent", `{"subject":"api-calls","quantity":100}`).want(t, 409, "LIMIT_CONFLICT")
	s.do(t, "GET", path, "demo-agent", "").want(t, 200, "")
	s.do(t, "POST", "/v1/subscriptions/sub_99/limits", "demo-agent", `{"subject":"x","quantity":1}`).want(t, 404, "NOT_FOUND")
}

func testSecretMint(t *testing.T, s *server) {
	body := `{"name":"ci","scopes":["read"]}`
	first := s.do(t, "POST", "/v1/tokens", "demo-agent", body, "Idempotency-Key", "mint-ci")
	if first.status/100 != 2 {
		t.Fatalf("mint = %s", first.raw)
	}
	secret, _ := first.get("data.secret").(string)
	again := s.do(t, "POST", "/v1/tokens", "demo-agent", body, "Idempotency-Key", "mint-ci")
	if again.status != first.status || again.get("data.secret") != secret || secret == "" || again.get("meta.idempotency.replayed") != true {
		t.Fatalf("secret replay: %s / %s", first.raw, again.raw)
	}
	list := s.do(t, "GET", "/v1/tokens", "demo-agent", "").want(t, 200, "")
	if strings.Contains(string(list.raw), secret) {
		t.Fatal("token.list shows the secret")
	}
}

func testIntrinsicReplay(t *testing.T, s *server) {
	s.do(t, "POST", "/v1/service-accounts/sa_1/approve", "demo-agent", "").want(t, 403, "FORBIDDEN")
	s.do(t, "POST", "/v1/service-accounts/sa_1/approve", "demo-approver", "", "Idempotency-Key", "k").want(t, 400, "IDEMPOTENCY_KEY_NOT_SUPPORTED")
	first := s.do(t, "POST", "/v1/service-accounts/sa_1/approve", "demo-approver", "").want(t, 200, "")
	again := s.do(t, "POST", "/v1/service-accounts/sa_1/approve", "demo-approver", "").want(t, 200, "")
	if first.get("data.approvedAt") == nil || first.get("data.approvedAt") != again.get("data.approvedAt") || first.get("data.approvedBy") != again.get("data.approvedBy") {
		t.Fatalf("intrinsic replay: %s / %s", first.raw, again.raw)
	}
	s.do(t, "GET", "/v1/service-accounts/sa_1", "demo-agent", "").want(t, 200, "")
	s.do(t, "GET", "/v1/service-accounts/sa_77", "demo-agent", "").want(t, 404, "NOT_FOUND")
}

func testNoAutomaticRetry(t *testing.T, s *server) {
	s.do(t, "POST", "/v1/auth/context-token", "demo-agent", "", "Idempotency-Key", "k").want(t, 400, "IDEMPOTENCY_KEY_NOT_SUPPORTED")
	a := s.do(t, "POST", "/v1/auth/context-token", "demo-agent", "")
	b := s.do(t, "POST", "/v1/auth/context-token", "demo-agent", "")
	if a.status/100 != 2 || b.status/100 != 2 || string(a.raw) == string(b.raw) {
		t.Fatalf("context tokens: %s / %s", a.raw, b.raw)
	}
	if r := catalogRetry(t, s, "auth.context_token"); r["reconcile"] != nil || r["responseSemantics"] != "point_in_time" {
		t.Fatalf("auth.context_token retry = %v", r)
	}
}

func testPreviewRoute(t *testing.T, s *server) {
	s.do(t, "POST", "/v1/businesses", "demo-agent", `{"slug":"agreeco","name":"Agree Co"}`, "Idempotency-Key", "create-agreeco").want(t, 201, "")
	terms := `{"terms":{"plan":"team","seats":5}}`
	s.do(t, "POST", "/v1/businesses/agreeco/agreements/preview", "demo-agent", terms, "Idempotency-Key", "k").want(t, 400, "IDEMPOTENCY_KEY_NOT_SUPPORTED")
	s.do(t, "POST", "/v1/businesses/agreeco/agreements/preview", "demo-agent", terms).want(t, 200, "")
	s.do(t, "POST", "/v1/businesses/agreeco/agreements/preview", "demo-agent", `{"terms":{"plan":"team","seats":0}}`).want(t, 400, "INVALID_INPUT")
	s.do(t, "POST", "/v1/businesses/agreeco/agreements", "demo-agent", terms, "Idempotency-Key", "agree-1").want(t, 201, "")
	s.do(t, "POST", "/v1/businesses/agreeco/agreements", "demo-agent", terms, "Idempotency-Key", "agree-1").want(t, 201, "")
	list := s.do(t, "GET", "/v1/businesses/agreeco/agreements", "demo-agent", "").want(t, 200, "")
	if n := strings.Count(string(list.raw), `"id":"agr_`); n != 1 {
		t.Fatalf("agreements after a create and its replay: %d; %s", n, list.raw)
	}
}

// ledgerEffects returns the gateway ledger's effects for the caller's org,
// reading it page after page (100 effects a page, the most it gives).
func ledgerEffects(t *testing.T, s *server, token string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for path := "/v1/demo/gateway/ledger?limit=100"; ; {
		l := s.do(t, "GET", path, token, "").want(t, 200, "")
		for _, e := range l.get("data.effects").([]any) {
			out = append(out, e.(map[string]any))
		}
		next, _ := l.get("data.nextCursor").(string)
		if next == "" {
			return out
		}
		path = "/v1/demo/gateway/ledger?limit=100&cursor=" + url.QueryEscape(next)
	}
}

func testApproval(t *testing.T, s *server) {
	body := `{"amount":6000}`
	req := s.do(t, "POST", "/v1/orders/ord_7/refund", "demo-agent", body, "Idempotency-Key", "refund-ord7").want(t, 403, "APPROVAL_REQUIRED")
	id, _ := req.get("details.approvalId").(string)
	if id == "" {
		t.Fatalf("APPROVAL_REQUIRED without approvalId: %s", req.raw)
	}
	s.do(t, "POST", "/v1/approvals/"+id+"/approve", "demo-agent", "").want(t, 403, "FORBIDDEN")
	s.do(t, "POST", "/v1/approvals/"+id+"/approve", "demo-approver", `{"reason":"customer called"}`).want(t, 200, "")
	done := s.do(t, "POST", "/v1/orders/ord_7/refund", "demo-agent", body, "Idempotency-Key", "refund-ord7").want(t, 200, "")
	s.do(t, "POST", "/v1/orders/ord_7/refund", "demo-agent", body, "Idempotency-Key", "refund-ord7").want(t, 200, "")
	got := s.do(t, "GET", "/v1/approvals/"+id, "demo-agent", "").want(t, 200, "")
	if got.get("data.status") != "consumed" || got.get("data.executionId") != done.get("meta.executionId") {
		t.Fatalf("approval after the refund = %s", got.raw)
	}
	var applied int
	for _, e := range ledgerEffects(t, s, "demo-agent") {
		if e["requestKey"] == "refund-ord7" {
			applied++
			if e["applied"] != true || e["calls"] != float64(1) || len(e["executionIds"].([]any)) != 1 {
				t.Fatalf("ledger effect = %v", e)
			}
		}
	}
	if applied != 1 {
		t.Fatalf("%d ledger effects for one key", applied)
	}
	if n := len(ledgerEffects(t, s, "demo-other-org")); n != 0 {
		t.Fatalf("another org sees %d effects", n)
	}
}

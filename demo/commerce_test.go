package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
)

// keyHeader is the Idempotency-Key header's values for key ("" for none).
func keyHeader(key string) []string {
	if key == "" {
		return nil
	}
	return []string{key}
}

// callAs is env.call for a principal that has no demo token, and with the
// caller's context.
func (e *testEnv) callAs(t *testing.T, ctx context.Context, p idem.Principal, r req) result {
	t.Helper()
	q := idem.Invocation{Operation: r.op, Surface: idem.SurfaceHTTP, Principal: p, Intent: idem.Intent{PathParams: r.path, Body: []byte(r.body)}}
	// The control inputs as the HTTP surface reads them.
	d, _ := e.runner.Describe(r.op)
	var err error
	q.Key, q.DryRun, q.Intent.Query, err = httpapi.ParseControls(d.Retry, r.query, http.Header{idem.HeaderIdempotencyKey: keyHeader(r.key)})
	var resp idem.Result
	if err != nil {
		resp = idem.ErrorResult(err, &idem.Meta{Operation: r.op})
	} else {
		resp = e.runner.Call(ctx, q)
	}
	out := result{Status: resp.Status, Raw: resp.Body()}
	var body struct {
		Data    json.RawMessage `json:"data"`
		Code    idem.Code       `json:"code"`
		Details map[string]any  `json:"details"`
		Meta    json.RawMessage `json:"meta"`
	}
	if err := json.Unmarshal(resp.Body(), &body); err != nil {
		t.Fatalf("%s: body %s: %v", r.op, resp.Body(), err)
	}
	out.Data, out.Code, out.Detail = body.Data, body.Code, body.Details
	if len(body.Meta) > 0 {
		_ = json.Unmarshal(body.Meta, &out.Meta)
	}
	return out
}

// retryable reads the problem's retryable member.
func (r result) retryable(t *testing.T) bool {
	t.Helper()
	var p struct {
		Retryable *bool `json:"retryable"`
	}
	if err := json.Unmarshal(r.Raw, &p); err != nil || p.Retryable == nil {
		t.Fatalf("no retryable in %s", r.Raw)
	}
	return *p.Retryable
}

// ledger reads the whole of GET /v1/demo/gateway/ledger as the holder of
// token, page after page.
func (e *testEnv) ledger(t *testing.T, token string) []gatewayEffect {
	t.Helper()
	all := []gatewayEffect{}
	for cursor := ""; ; {
		q := "?limit=100"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		effects, next := e.ledgerPage(t, token, q)
		all = append(all, effects...)
		if next == nil {
			return all
		}
		cursor = *next
	}
}

// ledgerPage reads one page of the ledger with the given query string.
func (e *testEnv) ledgerPage(t *testing.T, token, query string) ([]gatewayEffect, *string) {
	t.Helper()
	w := e.ledgerGet(t, token, query)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("ledger: %d %s: %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	var body struct {
		Data struct {
			Effects    []gatewayEffect `json:"effects"`
			NextCursor *string         `json:"nextCursor"`
		} `json:"data"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Data.Effects == nil {
		t.Fatalf("ledger %s: %v", w.Body, err)
	}
	return body.Data.Effects, body.Data.NextCursor
}

func (e *testEnv) ledgerGet(t *testing.T, token, query string) *httptest.ResponseRecorder {
	t.Helper()
	fn, ok := e.app.Routes()["GET /v1/demo/gateway/ledger"]
	if !ok {
		t.Fatal("no ledger route")
	}
	w := httptest.NewRecorder()
	fn(w, httptest.NewRequest("GET", "/v1/demo/gateway/ledger"+query, nil), Tokens()[token])
	return w
}

// effectsFor keeps the ledger rows of one order.
func effectsFor(effects []gatewayEffect, order string) []gatewayEffect {
	var out []gatewayEffect
	for _, e := range effects {
		if e.OrderID == order {
			out = append(out, e)
		}
	}
	return out
}

func (e *testEnv) order(t *testing.T, id string) orderView {
	t.Helper()
	var o orderView
	e.call(t, req{op: "order.show", path: map[string]string{"id": id}}).must(t, 200, "").into(t, &o)
	return o
}

func refund(token, order, body, key string) req {
	return req{token: token, op: "order.refund", path: map[string]string{"id": order}, body: body, key: key}
}

func TestFixtures(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		for _, org := range []string{"demo-agent", "demo-other-org"} {
			for _, id := range []string{"ord_1", "ord_100"} {
				var o orderView
				e.call(t, req{token: org, op: "order.show", path: map[string]string{"id": id}}).must(t, 200, "").into(t, &o)
				if o.ID != id || o.Amount != 10000 || o.Refunded != 0 || o.Remaining != 10000 || len(o.Refunds) != 0 {
					t.Errorf("%s %s: %+v", org, id, o)
				}
			}
			e.call(t, req{token: org, op: "limit.list", path: map[string]string{"sub": "sub_5"}}).must(t, 200, "")
			var sa serviceAccountView
			e.call(t, req{token: org, op: "serviceaccount.show", path: map[string]string{"id": "sa_5"}}).must(t, 200, "").into(t, &sa)
			if sa.Status != "pending_approval" || sa.ApprovedBy != nil || sa.ApprovedAt != nil {
				t.Errorf("%s sa_5: %+v", org, sa)
			}
		}
		// Unknown resources.
		e.call(t, req{op: "order.show", path: map[string]string{"id": "ord_101"}}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "order.show", path: map[string]string{"id": "ord_0"}}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "limit.list", path: map[string]string{"sub": "sub_6"}}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "serviceaccount.show", path: map[string]string{"id": "sa_6"}}).must(t, 404, idem.CodeNotFound)

		// Seeding again leaves existing rows alone.
		e.call(t, refund("", "ord_1", `{"amount": 100}`, "seed-check")).must(t, 200, "")
		if err := e.app.seedCommerce(context.Background(), "acme"); err != nil {
			t.Fatal(err)
		}
		if o := e.order(t, "ord_1"); o.Refunded != 100 {
			t.Errorf("after a second seed: %+v", o)
		}
	})
}

func TestContracts(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		for _, tc := range []struct {
			name, method, path string
			effect             idem.SideEffect
			kind               idem.RetryKind
			enforcement        idem.Enforcement
			semantics          idem.ResponseSemantics
			reconcile          string
		}{
			{"order.show", "GET", "/v1/orders/{id}", "read", "fresh_read", "fresh_read", "current_state", ""},
			{"order.refund", "POST", "/v1/orders/{id}/refund", "write", "same_key_replay", "idempotency_reservation", "original_attempt_result", "order.show"},
			{"limit.create", "POST", "/v1/subscriptions/{sub}/limits", "write", "convergent", "resource_identity", "current_state", "limit.list"},
			{"limit.update", "PUT", "/v1/limits/{id}", "write", "convergent", "resource_identity", "current_state", "limit.list"},
			{"limit.list", "GET", "/v1/subscriptions/{sub}/limits", "read", "fresh_read", "fresh_read", "current_state", ""},
			{"serviceaccount.approve", "POST", "/v1/service-accounts/{id}/approve", "write", "intrinsic_replay", "server_derived_transition", "current_state", "serviceaccount.show"},
			{"serviceaccount.show", "GET", "/v1/service-accounts/{id}", "read", "fresh_read", "fresh_read", "current_state", ""},
			{"agreement.preview", "POST", "/v1/businesses/{slug}/agreements/preview", "none", "preview", "none", "preview", ""},
			{"agreement.create", "POST", "/v1/businesses/{slug}/agreements", "write", "same_key_replay", "idempotency_reservation", "original_attempt_result", "agreement.list"},
			{"agreement.list", "GET", "/v1/businesses/{slug}/agreements", "read", "fresh_read", "fresh_read", "current_state", ""},
		} {
			d, ok := e.runner.Describe(tc.name)
			if !ok {
				t.Errorf("%s: not registered", tc.name)
				continue
			}
			r := d.Retry
			if d.Method != tc.method || d.Path != tc.path || d.SideEffect != tc.effect || r.Kind != tc.kind ||
				r.Enforcement != tc.enforcement || r.ResponseSemantics != tc.semantics || r.Reconcile != tc.reconcile || r.Preview {
				t.Errorf("%s: %s %s %s %+v", tc.name, d.Method, d.Path, d.SideEffect, r)
			}
			if d.Summary == "" || r.Rationale == "" || len(d.Errors) == 0 {
				t.Errorf("%s: summary %q, rationale %q, errors %v", tc.name, d.Summary, r.Rationale, d.Errors)
			}
		}
		d, _ := e.runner.Describe("order.refund")
		if !d.Idempotent || d.RuntimeRetry.MaxAttempts != 1 || d.Timeout != 5*time.Second || d.Approval != idem.ApprovalPolicy {
			t.Errorf("order.refund: idempotent %v, retry %+v, timeout %s, approval %s", d.Idempotent, d.RuntimeRetry, d.Timeout, d.Approval)
		}
		if d, _ := e.runner.Describe("agreement.create"); d.SuccessStatus != 201 {
			t.Errorf("agreement.create: success status %d", d.SuccessStatus)
		}
	})
}

func TestRefund(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		r := e.call(t, refund("", "ord_1", `{"amount": 1000}`, "refund-1")).must(t, 200, "")
		var res refundResult
		r.into(t, &res)
		if res.Refund.Amount != 1000 || res.Refund.OrderID != "ord_1" || res.Refund.ExecutionID != r.Meta.ExecutionID ||
			res.Order.Refunded != 1000 || res.Order.Remaining != 9000 || len(res.Order.Refunds) != 1 {
			t.Fatalf("refund: %s", r.Data)
		}
		check := func() {
			t.Helper()
			effects := e.ledger(t, "demo-agent")
			if len(effects) != 1 {
				t.Fatalf("ledger: %+v", effects)
			}
			g := effects[0]
			if g.Key == "" || g.Key == "refund-1" || g.Principal != "agent-1" || g.RequestKey == nil || *g.RequestKey != "refund-1" ||
				g.OrderID != "ord_1" || g.Amount != 1000 || g.Calls != 1 || !g.Applied ||
				len(g.ExecutionIDs) != 1 || g.ExecutionIDs[0] != r.Meta.ExecutionID {
				t.Fatalf("ledger row: %+v", g)
			}
		}
		check()

		// A same-key retry replays: same execution, no gateway call.
		again := e.call(t, refund("", "ord_1", `{"amount": 1000}`, "refund-1")).must(t, 200, "")
		if again.Meta.Idempotency == nil || !again.Meta.Idempotency.Replayed || again.Meta.ExecutionID != r.Meta.ExecutionID || string(again.Data) != string(r.Data) {
			t.Fatalf("replay: %s", again.Raw)
		}
		check()
		if o := e.order(t, "ord_1"); o.Refunded != 1000 || len(o.Refunds) != 1 || o.Refunds[0].ExecutionID != r.Meta.ExecutionID {
			t.Fatalf("order.show: %+v", o)
		}

		// An unkeyed refund (a browser may send none) reaches the gateway
		// with requestKey null.
		e.call(t, refund("demo-browser", "ord_2", `{"amount": 300}`, "")).must(t, 200, "")
		g := effectsFor(e.ledger(t, "demo-agent"), "ord_2")
		if len(g) != 1 || g[0].RequestKey != nil || g[0].Principal != "alice" || !g[0].Applied {
			t.Fatalf("unkeyed: %+v", g)
		}

		// Contract checks and input.
		e.call(t, refund("", "ord_1", `{"amount": 10}`, "")).must(t, 400, idem.CodeIdempotencyKeyRequired)
		e.call(t, refund("", "ord_1", `{"amount": 0}`, "refund-zero")).must(t, 400, idem.CodeInvalidInput)
		e.call(t, refund("", "ord_1", `{"amount": 10, "simulate": {"explode": true}}`, "refund-bad")).must(t, 400, idem.CodeInvalidInput)
		e.call(t, refund("", "ord_999", `{"amount": 10}`, "refund-404")).must(t, 404, idem.CodeNotFound)
		if len(e.ledger(t, "demo-agent")) != 2 {
			t.Fatal("a refused refund reached the gateway")
		}
	})
}

func TestRefundApproval(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		body := `{"amount": 6000}`
		r := e.call(t, refund("", "ord_3", body, "big-refund")).must(t, 403, idem.CodeApprovalRequired)
		id, _ := r.Detail["approvalId"].(string)
		if id == "" || r.Detail["reason"] == nil {
			t.Fatalf("details: %s", r.Raw)
		}
		if len(e.ledger(t, "demo-agent")) != 0 {
			t.Fatal("an unapproved refund reached the gateway")
		}
		if _, err := e.runner.DecideApproval(context.Background(), Tokens()["demo-approver"], id, true, "checked the order"); err != nil {
			t.Fatal(err)
		}
		ok := e.call(t, refund("", "ord_3", body, "big-refund")).must(t, 200, "")
		var res refundResult
		ok.into(t, &res)
		if res.Order.Remaining != 4000 {
			t.Fatalf("refund: %s", ok.Data)
		}
		// The same key replays; it never asks again.
		again := e.call(t, refund("", "ord_3", body, "big-refund")).must(t, 200, "")
		if !again.Meta.Idempotency.Replayed {
			t.Fatalf("not a replay: %s", again.Raw)
		}
		if g := e.ledger(t, "demo-agent"); len(g) != 1 || g[0].Calls != 1 || g[0].Amount != 6000 {
			t.Fatalf("ledger: %+v", g)
		}
		// 5000 is not over the threshold.
		e.call(t, refund("", "ord_4", `{"amount": 5000}`, "edge-refund")).must(t, 200, "")
	})
}

func TestRefundAlreadyRefunded(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		e.call(t, refund("", "ord_5", `{"amount": 5000}`, "half-1")).must(t, 200, "")
		e.call(t, refund("demo-agent-2", "ord_5", `{"amount": 5000}`, "half-2")).must(t, 200, "")
		r := e.call(t, refund("", "ord_5", `{"amount": 1}`, "one-more")).must(t, 409, CodeAlreadyRefunded)
		if r.Detail["remaining"] != float64(0) || r.Detail["orderId"] != "ord_5" || r.Meta.Idempotency == nil || r.Meta.Idempotency.Replayed {
			t.Fatalf("first answer: %s", r.Raw)
		}
		// Stored: the same key replays the 409.
		again := e.call(t, refund("", "ord_5", `{"amount": 1}`, "one-more")).must(t, 409, CodeAlreadyRefunded)
		if !again.Meta.Idempotency.Replayed || again.Meta.ExecutionID != r.Meta.ExecutionID {
			t.Fatalf("replay: %s", again.Raw)
		}
		// A partial refund past the remaining amount is refused too.
		e.call(t, refund("", "ord_6", `{"amount": 4000}`, "part-1")).must(t, 200, "")
		r = e.call(t, refund("", "ord_6", `{"amount": 4000}`, "part-2")).must(t, 200, "")
		r = e.call(t, refund("", "ord_6", `{"amount": 2001}`, "part-3")).must(t, 409, CodeAlreadyRefunded)
		if r.Detail["remaining"] != float64(2000) {
			t.Fatalf("remaining: %s", r.Raw)
		}
		effects := e.ledger(t, "demo-agent")
		if len(effects) != 4 {
			t.Fatalf("ledger: %+v", effects)
		}
		for _, g := range effects {
			if !g.Applied || g.Calls != 1 {
				t.Fatalf("ledger row: %+v", g)
			}
		}
	})
}

func TestRefundConcurrentOnOneOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		const n = 6
		statuses := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				resp := e.runner.Call(context.Background(), idem.Invocation{
					Operation: "order.refund",
					Surface:   idem.SurfaceHTTP,
					Principal: Tokens()["demo-agent"],
					Key:       fmt.Sprintf("race-%d", i),
					Intent:    idem.Intent{PathParams: map[string]string{"id": "ord_7"}, Body: []byte(`{"amount": 4000}`)},
				})
				statuses[i] = resp.Status
			})
		}
		wg.Wait()
		count := map[int]int{}
		for _, s := range statuses {
			count[s]++
		}
		if count[200] != 2 || count[409] != n-2 {
			t.Fatalf("statuses %v", statuses)
		}
		if o := e.order(t, "ord_7"); o.Refunded != 8000 || len(o.Refunds) != 2 {
			t.Fatalf("order: %+v", o)
		}
		if g := effectsFor(e.ledger(t, "demo-agent"), "ord_7"); len(g) != 2 {
			t.Fatalf("ledger: %+v", g)
		}
	})
}

func TestRefundFaults(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		// failAfterEffect: the refund is applied, the answer is a 500 and
		// the key is indeterminate from then on.
		r := e.call(t, refund("", "ord_8", `{"amount": 700, "simulate": {"failAfterEffect": true}}`, "after")).must(t, 500, idem.CodeExecutionFailed)
		if r.Meta.Attempts != 1 || r.retryable(t) || r.Detail["reconcile"] != "order.show" {
			t.Fatalf("failAfterEffect: %s", r.Raw)
		}
		e.call(t, refund("", "ord_8", `{"amount": 700, "simulate": {"failAfterEffect": true}}`, "after")).must(t, 409, idem.CodeIdempotencyResultIndeterminate)
		g := effectsFor(e.ledger(t, "demo-agent"), "ord_8")
		if len(g) != 1 || !g[0].Applied || g[0].Calls != 1 || len(g[0].ExecutionIDs) != 1 || g[0].ExecutionIDs[0] != r.Meta.ExecutionID {
			t.Fatalf("failAfterEffect ledger: %+v", g)
		}
		if o := e.order(t, "ord_8"); o.Refunded != 700 {
			t.Fatalf("failAfterEffect order: %+v", o)
		}

		// failBeforeEffect: both attempts fail before the gateway.
		r = e.call(t, refund("", "ord_9", `{"amount": 700, "simulate": {"failBeforeEffect": true}}`, "before")).must(t, 500, idem.CodeExecutionFailed)
		if r.Meta.Attempts != 2 || r.retryable(t) {
			t.Fatalf("failBeforeEffect: %s", r.Raw)
		}
		e.call(t, refund("", "ord_9", `{"amount": 700, "simulate": {"failBeforeEffect": true}}`, "before")).must(t, 409, idem.CodeIdempotencyResultIndeterminate)
		if g := effectsFor(e.ledger(t, "demo-agent"), "ord_9"); len(g) != 0 {
			t.Fatalf("failBeforeEffect reached the gateway: %+v", g)
		}
		if o := e.order(t, "ord_9"); o.Refunded != 0 {
			t.Fatalf("failBeforeEffect order: %+v", o)
		}

		// A short delay just delays.
		e.call(t, refund("", "ord_10", `{"amount": 100, "simulate": {"delayMs": 20}}`, "short-delay")).must(t, 200, "")

		// A delay honours cancellation: the gateway is never called. (The
		// handler's context is cancelled, so it could not commit a gateway
		// call afterwards either.)
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(100*time.Millisecond, cancel)
		defer stop.Stop()
		start := time.Now()
		r = e.callAs(t, ctx, Tokens()["demo-agent"], refund("", "ord_11", `{"amount": 100, "simulate": {"delayMs": 4000}}`, "cancelled"))
		r.must(t, 499, idem.CodeCancelled)
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("cancellation took %s", took)
		}
		if g := effectsFor(e.ledger(t, "demo-agent"), "ord_11"); len(g) != 0 {
			t.Fatalf("cancelled refund reached the gateway: %+v", g)
		}
	})
}

// TestRefundTimeoutOnce waits out the 5 s attempt timeout, so it runs on
// SQLite only.
func TestRefundTimeoutOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 5 s for an attempt timeout")
	}
	e := newTestEnv(t, stores["sqlite"](t), Config{})
	r := e.call(t, refund("", "ord_12", `{"amount": 900, "simulate": {"timeoutOnce": true}}`, "slow-once")).must(t, 200, "")
	if r.Meta.Attempts != 2 {
		t.Fatalf("attempts: %s", r.Raw)
	}
	g := e.ledger(t, "demo-agent")
	if len(g) != 1 || g[0].Calls != 1 || !g[0].Applied || len(g[0].ExecutionIDs) != 1 || g[0].ExecutionIDs[0] != r.Meta.ExecutionID {
		t.Fatalf("ledger: %+v", g)
	}
	if o := e.order(t, "ord_12"); o.Refunded != 900 || len(o.Refunds) != 1 {
		t.Fatalf("order: %+v", o)
	}
}

func TestLedgerIsPerOrg(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		e.call(t, refund("", "ord_1", `{"amount": 100}`, "acme-refund")).must(t, 200, "")
		if g := e.ledger(t, "demo-other-org"); len(g) != 0 {
			t.Fatalf("globex sees acme's ledger: %+v", g)
		}
		// Same order id, same key, another org: independent.
		e.call(t, refund("demo-other-org", "ord_1", `{"amount": 200}`, "acme-refund")).must(t, 200, "")
		if g := e.ledger(t, "demo-other-org"); len(g) != 1 || g[0].Principal != "agent-9" || g[0].Amount != 200 {
			t.Fatalf("globex ledger: %+v", g)
		}
		if g := e.ledger(t, "demo-agent"); len(g) != 1 || g[0].Amount != 100 {
			t.Fatalf("acme ledger: %+v", g)
		}
		if o := e.order(t, "ord_1"); o.Refunded != 100 {
			t.Fatalf("acme order: %+v", o)
		}
	})
}

func createLimit(sub, body string) req {
	return req{op: "limit.create", path: map[string]string{"sub": sub}, body: body}
}

func TestLimits(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		var created limitView
		e.call(t, createLimit("sub_1", `{"subject": "api_calls", "quantity": 100}`)).must(t, 201, "").into(t, &created)
		if created.ID == "" || created.Subscription != "sub_1" || created.Subject != "api_calls" || created.Quantity != 100 || created.Version != 1 {
			t.Fatalf("created: %+v", created)
		}
		// An exact repeat finds the row.
		var same limitView
		e.call(t, createLimit("sub_1", `{"quantity": 100, "subject": "api_calls"}`)).must(t, 200, "").into(t, &same)
		if same != created {
			t.Fatalf("repeat: %+v, want %+v", same, created)
		}
		// Another quantity conflicts, showing the current row.
		r := e.call(t, createLimit("sub_1", `{"subject": "api_calls", "quantity": 200}`)).must(t, 409, CodeLimitConflict)
		current, _ := r.Detail["current"].(map[string]any)
		if current["id"] != created.ID || current["quantity"] != float64(100) {
			t.Fatalf("conflict: %s", r.Raw)
		}
		// A key is refused: the contract is convergent.
		e.call(t, req{op: "limit.create", path: map[string]string{"sub": "sub_1"}, body: `{"subject": "api_calls", "quantity": 100}`, key: "k1"}).
			must(t, 400, idem.CodeIdempotencyKeyNotSupported)

		// Update; the old exact repeat now conflicts.
		var updated limitView
		e.call(t, req{op: "limit.update", path: map[string]string{"id": created.ID}, body: `{"quantity": 200}`}).must(t, 200, "").into(t, &updated)
		if updated.Quantity != 200 || updated.Version != 2 || updated.UpdatedAt.Before(created.UpdatedAt) {
			t.Fatalf("updated: %+v", updated)
		}
		e.call(t, createLimit("sub_1", `{"subject": "api_calls", "quantity": 100}`)).must(t, 409, CodeLimitConflict)
		// Back to 100: same quantity, but changed since creation.
		e.call(t, req{op: "limit.update", path: map[string]string{"id": created.ID}, body: `{"quantity": 100}`}).must(t, 200, "").into(t, &updated)
		if updated.Version != 3 {
			t.Fatalf("updated: %+v", updated)
		}
		r = e.call(t, createLimit("sub_1", `{"subject": "api_calls", "quantity": 100}`)).must(t, 409, CodeLimitConflict)
		if current, _ := r.Detail["current"].(map[string]any); current["version"] != float64(3) {
			t.Fatalf("conflict: %s", r.Raw)
		}
		// Setting the quantity it has changes nothing.
		var noop limitView
		e.call(t, req{op: "limit.update", path: map[string]string{"id": created.ID}, body: `{"quantity": 100}`}).must(t, 200, "").into(t, &noop)
		if noop != updated {
			t.Fatalf("no-op update: %+v, want %+v", noop, updated)
		}

		// Another subject is another limit; list shows both.
		e.call(t, createLimit("sub_1", `{"subject": "seats", "quantity": 5}`)).must(t, 201, "")
		var list limitList
		e.call(t, req{op: "limit.list", path: map[string]string{"sub": "sub_1"}}).must(t, 200, "").into(t, &list)
		if len(list.Limits) != 2 || list.Limits[0].ID != created.ID || list.Limits[0].Quantity != 100 || list.Limits[1].Subject != "seats" {
			t.Fatalf("list: %+v", list)
		}
		// Other subscriptions and orgs see none of it.
		e.call(t, req{op: "limit.list", path: map[string]string{"sub": "sub_2"}}).must(t, 200, "").into(t, &list)
		if len(list.Limits) != 0 {
			t.Fatalf("sub_2: %+v", list)
		}
		e.call(t, req{token: "demo-other-org", op: "limit.list", path: map[string]string{"sub": "sub_1"}}).must(t, 200, "").into(t, &list)
		if len(list.Limits) != 0 {
			t.Fatalf("globex: %+v", list)
		}
		e.call(t, req{token: "demo-other-org", op: "limit.update", path: map[string]string{"id": created.ID}, body: `{"quantity": 1}`}).must(t, 404, idem.CodeNotFound)

		// Unknown subscription and limit.
		e.call(t, createLimit("sub_9", `{"subject": "api_calls", "quantity": 100}`)).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "limit.update", path: map[string]string{"id": "lim_nope"}, body: `{"quantity": 1}`}).must(t, 404, idem.CodeNotFound)
	})
}

func TestLimitCreateRace(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		race := func(sub string, bodies ...string) map[int]int {
			statuses := make([]int, len(bodies))
			var wg sync.WaitGroup
			for i, body := range bodies {
				wg.Go(func() {
					resp := e.runner.Call(context.Background(), idem.Invocation{
						Operation: "limit.create",
						Surface:   idem.SurfaceHTTP,
						Principal: Tokens()["demo-agent"],
						Intent:    idem.Intent{PathParams: map[string]string{"sub": sub}, Body: []byte(body)},
					})
					statuses[i] = resp.Status
				})
			}
			wg.Wait()
			count := map[int]int{}
			for _, s := range statuses {
				count[s]++
			}
			var list limitList
			e.call(t, req{op: "limit.list", path: map[string]string{"sub": sub}}).must(t, 200, "").into(t, &list)
			if len(list.Limits) != 1 {
				t.Fatalf("%s: %d rows after the race: %+v", sub, len(list.Limits), list)
			}
			return count
		}
		same := `{"subject": "api_calls", "quantity": 10}`
		if c := race("sub_2", same, same, same, same, same, same, same, same); c[201] != 1 || c[200] != 7 {
			t.Fatalf("same intent: %v", c)
		}
		other := `{"subject": "api_calls", "quantity": 20}`
		if c := race("sub_3", same, other, same, other, same, other); c[201] != 1 || c[200]+c[409] != 5 || c[409] < 3 {
			t.Fatalf("two intents: %v", c)
		}
	})
}

func TestServiceAccountApprove(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		approve := func(token string) req {
			return req{token: token, op: "serviceaccount.approve", path: map[string]string{"id": "sa_1"}}
		}
		e.call(t, approve("demo-agent")).must(t, 403, idem.CodeForbidden)
		e.call(t, approve("demo-browser")).must(t, 403, idem.CodeForbidden)
		var sa serviceAccountView
		e.call(t, req{op: "serviceaccount.show", path: map[string]string{"id": "sa_1"}}).must(t, 200, "").into(t, &sa)
		if sa.Status != "pending_approval" {
			t.Fatalf("after refusals: %+v", sa)
		}

		var first serviceAccountView
		e.call(t, approve("demo-approver")).must(t, 200, "").into(t, &first)
		if first.Status != "approved" || first.ApprovedBy == nil || *first.ApprovedBy != "bob" || first.ApprovedAt == nil {
			t.Fatalf("approved: %+v", first)
		}
		// The same transition, by the same approver or another.
		carol := idem.Principal{Org: "acme", ID: "carol", Kind: idem.KindCLISession, Roles: []string{idem.RoleApprover}}
		for _, r := range []result{
			e.call(t, approve("demo-approver")),
			e.callAs(t, context.Background(), carol, approve("")),
		} {
			var again serviceAccountView
			r.must(t, 200, "").into(t, &again)
			if *again.ApprovedBy != "bob" || !again.ApprovedAt.Equal(*first.ApprovedAt) || again.Status != "approved" {
				t.Fatalf("repeat: %+v, want %+v", again, first)
			}
		}
		e.call(t, req{op: "serviceaccount.show", path: map[string]string{"id": "sa_1"}}).must(t, 200, "").into(t, &sa)
		if *sa.ApprovedBy != "bob" || !sa.ApprovedAt.Equal(*first.ApprovedAt) {
			t.Fatalf("show: %+v", sa)
		}

		// A key is refused: the transition is its own identity.
		e.call(t, req{token: "demo-approver", op: "serviceaccount.approve", path: map[string]string{"id": "sa_2"}, key: "k1"}).
			must(t, 400, idem.CodeIdempotencyKeyNotSupported)
		e.call(t, approve("demo-other-org")).must(t, 403, idem.CodeForbidden)
		e.call(t, req{token: "demo-other-org", op: "serviceaccount.show", path: map[string]string{"id": "sa_1"}}).must(t, 200, "").into(t, &sa)
		if sa.Status != "pending_approval" {
			t.Fatalf("globex sa_1: %+v", sa)
		}
		e.call(t, req{token: "demo-approver", op: "serviceaccount.approve", path: map[string]string{"id": "sa_9"}}).must(t, 404, idem.CodeNotFound)
	})
}

func TestAgreements(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		e.call(t, req{op: "business.create", body: `{"slug": "quillby", "name": "Quillby"}`, key: "biz-1"}).must(t, 201, "")
		path := map[string]string{"slug": "quillby"}
		terms := `{"terms": {"plan": "team", "seats": 3}}`

		e.call(t, req{op: "agreement.preview", path: path, body: terms, key: "k1"}).must(t, 400, idem.CodeIdempotencyKeyNotSupported)
		var preview agreementPreview
		e.call(t, req{op: "agreement.preview", path: path, body: terms}).must(t, 200, "").into(t, &preview)
		if preview.Business != "quillby" || preview.Price.UnitAmount != 2500 || preview.Price.TotalAmount != 7500 || preview.Terms.Seats != 3 {
			t.Fatalf("preview: %+v", preview)
		}
		e.call(t, req{op: "agreement.preview", path: path, body: `{"terms": {"plan": "team", "seats": 0}}`}).must(t, 400, idem.CodeInvalidInput)
		e.call(t, req{op: "agreement.preview", path: path, body: `{"terms": {"seats": 2}}`}).must(t, 400, idem.CodeInvalidInput)

		e.call(t, req{op: "agreement.create", path: path, body: terms}).must(t, 400, idem.CodeIdempotencyKeyRequired)
		r := e.call(t, req{op: "agreement.create", path: path, body: terms, key: "agr-1"}).must(t, 201, "")
		var created agreementView
		r.into(t, &created)
		if created.ID == "" || created.CreatedBy != "agent-1" || created.Price != preview.Price || created.Terms != preview.Terms {
			t.Fatalf("created: %+v", created)
		}
		again := e.call(t, req{op: "agreement.create", path: path, body: terms, key: "agr-1"}).must(t, 201, "")
		if !again.Meta.Idempotency.Replayed || string(again.Data) != string(r.Data) {
			t.Fatalf("replay: %s", again.Raw)
		}
		var list agreementList
		e.call(t, req{op: "agreement.list", path: path}).must(t, 200, "").into(t, &list)
		if len(list.Agreements) != 1 || list.Agreements[0].ID != created.ID || list.Agreements[0].Price != created.Price ||
			!list.Agreements[0].CreatedAt.Equal(created.CreatedAt) {
			t.Fatalf("list: %+v", list)
		}

		// Unknown business, also for another org.
		nope := map[string]string{"slug": "nope"}
		e.call(t, req{op: "agreement.preview", path: nope, body: terms}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "agreement.create", path: nope, body: terms, key: "agr-2"}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{op: "agreement.list", path: nope}).must(t, 404, idem.CodeNotFound)
		e.call(t, req{token: "demo-other-org", op: "agreement.list", path: path}).must(t, 404, idem.CodeNotFound)
	})
}

// TestGatewayDeduplicates calls the simulator directly: a key it has seen
// applies nothing, but is counted, and a new execution id is remembered.
func TestGatewayDeduplicates(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		p := gatewayRefundParams{Org: "acme", Key: "ik_test", Principal: "agent-1", RequestKey: "rk", ExecutionID: "exe_1", OrderID: "ord_1", Amount: 100}
		for i, tc := range []struct {
			execution string
			applied   bool
			calls     int64
			ids       []string
		}{
			{"exe_1", true, 1, []string{"exe_1"}},
			{"exe_1", false, 2, []string{"exe_1"}},
			{"exe_2", false, 3, []string{"exe_1", "exe_2"}},
		} {
			p.ExecutionID = tc.execution
			err := e.app.db.InTx(ctx, func(tx *Tx) error {
				g, applied, err := gatewayRefund(ctx, tx, e.app.now(), p)
				if err != nil {
					return err
				}
				if applied != tc.applied || g.Calls != tc.calls || !g.Applied || fmt.Sprint(g.ExecutionIDs) != fmt.Sprint(tc.ids) || g.Amount != 100 {
					t.Errorf("call %d: applied %v, %+v", i+1, applied, g)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if g := e.ledger(t, "demo-agent"); len(g) != 1 || g[0].Calls != 3 || *g[0].RequestKey != "rk" {
			t.Fatalf("ledger: %+v", g)
		}
	})
}

// TestRefundRetryAfterCommittedEffect runs the handler twice as the
// runtime would retry one execution whose first attempt committed but
// whose answer was lost: the second attempt makes no second refund.
func TestRefundRetryAfterCommittedEffect(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		call := &idem.Call{Operation: "order.refund", ExecutionID: "exe_retry", Attempt: 1, Principal: Tokens()["demo-agent"], IdempotencyKey: "ik_retry", RequestKey: "rk"}
		in := refundInput{ID: "ord_13", Amount: 6000}
		first, err := e.app.refundOrder(ctx, call, in)
		if err != nil {
			t.Fatal(err)
		}
		call.Attempt = 2
		second, err := e.app.refundOrder(ctx, call, in)
		if err != nil {
			t.Fatal(err)
		}
		if second.Refund != first.Refund || second.Order.Refunded != 6000 {
			t.Fatalf("second attempt: %+v, first %+v", second, first)
		}
		g := e.ledger(t, "demo-agent")
		if len(g) != 1 || g[0].Calls != 2 || len(g[0].ExecutionIDs) != 1 {
			t.Fatalf("ledger: %+v", g)
		}
		if o := e.order(t, "ord_13"); o.Refunded != 6000 || len(o.Refunds) != 1 {
			t.Fatalf("order: %+v", o)
		}
	})
}

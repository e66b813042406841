package e2e

import (
	"strings"
	"testing"
)

// TestControlParametersStrict: against the built binary, a dryRun that is
// not exactly true or false given once creates no business and applies no
// refund (issue 15, item 2); a malformed Prefer: wait runs nothing either.
func TestControlParametersStrict(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, stores["sqlite"](t, dir), dir)
	for i, q := range []string{"dryRun=1", "dryRun=True", "dryRun=yes", "dryRun=false&dryRun=true", "dryRun="} {
		slug := "strict-" + string(rune('a'+i))
		s.do(t, "POST", "/v1/businesses?"+q, "demo-browser", `{"slug":"`+slug+`","name":"S"}`).want(t, 400, "INVALID_INPUT")
		s.do(t, "POST", "/v1/businesses?"+q, "demo-agent", `{"slug":"`+slug+`","name":"S"}`, "Idempotency-Key", "k-"+slug).want(t, 400, "INVALID_INPUT")
		s.do(t, "GET", "/v1/businesses/"+slug, "demo-agent", "").want(t, 404, "NOT_FOUND")
		s.do(t, "GET", "/v1/attempts/k-"+slug, "demo-agent", "").want(t, 404, "NOT_FOUND")
		s.do(t, "POST", "/v1/orders/ord_2/refund?"+q, "demo-agent", `{"amount":10}`, "Idempotency-Key", "r-"+slug).want(t, 400, "INVALID_INPUT")
	}
	for _, prefer := range []string{"wait=abc", "wait=-1", "wait=1.5", "wait=", "wait=1, wait=2"} {
		r := s.do(t, "POST", "/v1/orders/ord_2/refund", "demo-agent", `{"amount":10}`, "Idempotency-Key", "r-prefer", "Prefer", prefer).want(t, 400, "INVALID_INPUT")
		if !strings.Contains(string(r.raw), "wait") {
			t.Fatalf("Prefer: %s answered %s", prefer, r.raw)
		}
	}
	if effects := ledgerEffects(t, s, "demo-agent"); len(effects) != 0 {
		t.Fatalf("refunds with malformed control parameters reached the gateway: %v", effects)
	}
}

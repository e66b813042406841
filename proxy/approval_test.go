package proxy_test

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// TestUpstreamNotRunKeepsTheApproval: an approved proxied call that the
// upstream answers 429 with Retry-After (it ran nothing) frees the key and
// leaves the approval approved, so the same call sent again runs with it
// instead of asking for a new one (SPEC §8, issue 33 item 6).
func TestUpstreamNotRunKeepsTheApproval(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if busy.Load() {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":"busy"}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"t1"}`))
	})
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	overlay := proxy.Overlay{"createThing": {Kind: idem.RetrySameKeyReplay, Reconcile: "listThings", Rationale: "By key.", Approval: idem.ApprovalAlways}}
	built, err := proxy.Build(loadDoc(t, keyedDoc), overlay, proxy.Options{Forward: f.Handler})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, built.Operations)
	call := func() idem.Result {
		return r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: idem.SurfaceHTTP, Principal: agent,
			Key: "k-approved", Intent: idem.Intent{ContentType: "application/json", Body: []byte(`{"name":"a"}`)}})
	}
	asked := call()
	if asked.Status != http.StatusForbidden || problemOf(t, asked).Code != idem.CodeApprovalRequired {
		t.Fatalf("first call: %d %s, want APPROVAL_REQUIRED", asked.Status, asked.Body())
	}
	var body struct {
		Details struct {
			ApprovalID string `json:"approvalId"`
		} `json:"details"`
	}
	if err := json.Unmarshal(asked.Body(), &body); err != nil {
		t.Fatal(err)
	}
	id := body.Details.ApprovalID
	approver := idem.Principal{Org: "acme", ID: "bob", Kind: idem.KindCLISession, Roles: []string{idem.RoleApprover}}
	if _, err := r.DecideApproval(t.Context(), approver, id, true, ""); err != nil {
		t.Fatal(err)
	}
	if res := call(); res.Status != http.StatusTooManyRequests || up.count.Load() != 1 {
		t.Fatalf("the approved call: %d %s (upstream calls %d), want the upstream's 429", res.Status, res.Body(), up.count.Load())
	}
	busy.Store(false)
	if res := call(); res.Status != http.StatusCreated || res.Replayed || up.count.Load() != 2 {
		t.Fatalf("the same call once the upstream has room: %d %s (upstream calls %d); want it run with its approval", res.Status, res.Body(), up.count.Load())
	}
	a, err := r.GetApproval(t.Context(), agent, id)
	if err != nil || a.Status != idem.ApprovalConsumed {
		t.Fatalf("the approval after the call ran: %+v, %v; want consumed", a, err)
	}
}

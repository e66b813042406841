package idem

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestMetadataValidate(t *testing.T) {
	base := func() Metadata {
		return Metadata{
			Name: "order.refund", Method: "post", Path: "/v1/orders/{id}/refund", Summary: "Refund an order",
			SideEffect: SideEffectWrite, Idempotent: true, RuntimeRetry: RuntimeRetry{MaxAttempts: 1},
			Retry: RetryContract{Kind: RetrySameKeyReplay, Reconcile: "order.show", Rationale: "r"},
		}
	}
	tests := []struct {
		name   string
		modify func(*Metadata)
		rule   string // "" means valid
	}{
		{"valid", func(*Metadata) {}, ""},
		{"read derives fresh_read", func(m *Metadata) {
			m.SideEffect, m.Retry, m.Idempotent = SideEffectRead, RetryContract{}, false
		}, ""},
		{"retry on write without idempotent", func(m *Metadata) { m.Idempotent = false }, "needs idempotent: true"},
		{"retry on external without idempotent", func(m *Metadata) { m.SideEffect, m.Idempotent = SideEffectExternal, false }, "needs idempotent: true"},
		{"retry on destructive without idempotent", func(m *Metadata) { m.SideEffect, m.Idempotent = SideEffectDestructive, false }, "needs idempotent: true"},
		{"same_key_replay on read", func(m *Metadata) { m.SideEffect = SideEffectRead }, "only writing operations"},
		{"same_key_replay on none", func(m *Metadata) { m.SideEffect = SideEffectNone }, "only writing operations"},
		{"fresh_read on write", func(m *Metadata) { m.Retry = RetryContract{Kind: RetryFreshRead} }, "never a fresh read"},
		{"write without kind", func(m *Metadata) { m.Retry = RetryContract{} }, "must declare its retry contract kind"},
		{"same_key_replay without reconcile", func(m *Metadata) { m.Retry.Reconcile = "" }, "needs a reconcile"},
		{"no_automatic_retry with reconcile", func(m *Metadata) {
			m.Retry, m.RuntimeRetry = RetryContract{Kind: RetryNoAutomaticRetry, Reconcile: "x.y"}, RuntimeRetry{}
		}, "takes no reconcile"},
		{"unknown kind", func(m *Metadata) { m.Retry.Kind = "sometimes" }, "is not one of"},
		{"transactional write", func(m *Metadata) { m.Retry.Transactional, m.RuntimeRetry = true, RuntimeRetry{} }, ""},
		{"transactional with runtime retry", func(m *Metadata) { m.Retry.Transactional = true }, "runtime retry on a transactional operation"},
		{"transactional external", func(m *Metadata) {
			m.SideEffect, m.Retry.Transactional, m.RuntimeRetry = SideEffectExternal, true, RuntimeRetry{}
		}, "only write and destructive operations"},
		{"bad name", func(m *Metadata) { m.Name = "Refund" }, "dotted lower case"},
		{"no summary", func(m *Metadata) { m.Summary = "" }, "summary is required"},
		{"bad side effect", func(m *Metadata) { m.SideEffect = "mutate" }, "side effect"},
		{"bad approval", func(m *Metadata) { m.Approval = "sometimes" }, "approval"},
		{"bad surface", func(m *Metadata) { m.Surfaces = []Surface{"grpc"} }, "surface"},
		{"secret replay on convergent", func(m *Metadata) {
			m.Retry = RetryContract{Kind: RetryConvergent, Enforcement: EnforceTransactionalSecretReplay, Reconcile: "x.y"}
		}, "needs retry kind same_key_replay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			tt.modify(&m)
			err := m.WithDefaults().Validate()
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.rule) || !strings.Contains(err.Error(), `"`+m.Name+`"`) {
				t.Fatalf("Validate = %v, want an error naming the operation and %q", err, tt.rule)
			}
		})
	}
}

func TestMetadataDefaults(t *testing.T) {
	m := Metadata{Name: "business.show", Method: "get", Path: "/v1/businesses/{slug}", Summary: "s", SideEffect: SideEffectRead}.WithDefaults()
	if m.Method != "GET" || m.Timeout != 30*time.Second || m.RuntimeRetry.BackoffMs != 250 || m.Approval != ApprovalNone || len(m.Surfaces) != 3 {
		t.Fatalf("defaults = %+v", m)
	}
	want := RetryContract{Kind: RetryFreshRead, Enforcement: EnforceFreshRead, ResponseSemantics: SemanticsCurrentState}
	if m.Retry != want {
		t.Fatalf("derived contract = %+v, want %+v", m.Retry, want)
	}
	secret := RetryContract{Kind: RetrySameKeyReplay, Enforcement: EnforceTransactionalSecretReplay, Reconcile: "token.list"}.WithDefaults()
	if !secret.KeyRequired || secret.SecretReplayWindowMs != 900000 || secret.ResponseSemantics != SemanticsOriginalAttemptResult {
		t.Fatalf("secret contract defaults = %+v", secret)
	}
}

func TestRetryContractJSON(t *testing.T) {
	tests := []struct {
		name string
		c    RetryContract
		want string
	}{
		{"same_key_replay", RetryContract{Kind: RetrySameKeyReplay, Reconcile: "business.show", Rationale: "r"}.WithDefaults(),
			`{"kind":"same_key_replay","keyRequired":true,"enforcement":"idempotency_reservation","responseSemantics":"original_attempt_result","reconcile":"business.show","rationale":"r","preview":false,"transactional":false}`},
		{"fresh_read has null reconcile", RetryContract{Kind: RetryFreshRead, Rationale: "r"}.WithDefaults(),
			`{"kind":"fresh_read","keyRequired":false,"enforcement":"fresh_read","responseSemantics":"current_state","reconcile":null,"rationale":"r","preview":false,"transactional":false}`},
		{"secret window", RetryContract{Kind: RetrySameKeyReplay, Enforcement: EnforceTransactionalSecretReplay, Reconcile: "token.list", Rationale: "r"}.WithDefaults(),
			`{"kind":"same_key_replay","keyRequired":true,"enforcement":"transactional_secret_replay","responseSemantics":"original_attempt_result","reconcile":"token.list","rationale":"r","preview":false,"transactional":false,"secretReplayWindowMs":900000}`},
		{"transactional", RetryContract{Kind: RetryConvergent, Reconcile: "limit.show", Rationale: "r", Transactional: true}.WithDefaults(),
			`{"kind":"convergent","keyRequired":false,"enforcement":"resource_identity","responseSemantics":"current_state","reconcile":"limit.show","rationale":"r","preview":false,"transactional":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.c)
			if err != nil || string(got) != tt.want {
				t.Fatalf("Marshal = %s, %v\nwant %s", got, err, tt.want)
			}
			var back RetryContract
			if err := json.Unmarshal(got, &back); err != nil || back != tt.c {
				t.Fatalf("round trip = %+v, %v", back, err)
			}
		})
	}
}

func TestLeaseAndBackoff(t *testing.T) {
	m := Metadata{Timeout: 5 * time.Second, RuntimeRetry: RuntimeRetry{MaxAttempts: 2, BackoffMs: 250}}
	// 3 attempts × 5 s + backoff 250 ms + 500 ms + grace 5 s.
	if got, want := m.Lease(5*time.Second), 20750*time.Millisecond; got != want {
		t.Fatalf("Lease = %v, want %v", got, want)
	}
	tests := []struct {
		n    int
		want time.Duration
	}{{1, 250 * time.Millisecond}, {2, 500 * time.Millisecond}, {3, time.Second}, {10, MaxBackoffCap}, {100, MaxBackoffCap}}
	for _, tt := range tests {
		if got := MaxBackoff(250, tt.n); got != tt.want {
			t.Errorf("MaxBackoff(250, %d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestAttemptObserve(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	inFlight := Attempt{State: AttemptInFlight, LeaseExpiresAt: t0.Add(time.Minute), ExpiresAt: t0.Add(24 * time.Hour)}
	secret := Attempt{State: AttemptCompleted, Status: 201, Body: []byte("c"), SealedKeyID: "k", SecretExpiresAt: t0.Add(15 * time.Minute)}
	tests := []struct {
		name     string
		a        Attempt
		at       time.Time
		state    AttemptState
		bodyKept bool
	}{
		{"in flight inside lease", inFlight, t0, AttemptInFlight, false},
		{"in flight at lease end (made indeterminate by a write, not by Observe)", inFlight, t0.Add(time.Minute), AttemptInFlight, false},
		{"secret inside window", secret, t0, AttemptCompleted, true},
		{"secret at window end", secret, t0.Add(15 * time.Minute), AttemptExpired, false},
		{"plain result never expires", Attempt{State: AttemptCompleted, Body: []byte("b")}, t0.Add(48 * time.Hour), AttemptCompleted, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.a.Observe(tt.at)
			if got.State != tt.state || (got.Body != nil) != tt.bodyKept {
				t.Fatalf("Observe = state %s body %q", got.State, got.Body)
			}
		})
	}
	if inFlight.LeasePassed(t0.Add(time.Minute-time.Microsecond)) || !inFlight.LeasePassed(t0.Add(time.Minute)) {
		t.Error("LeasePassed splits at the wrong time")
	}
	if done := (Attempt{State: AttemptCompleted, LeaseExpiresAt: t0}); done.LeasePassed(t0.Add(time.Hour)) {
		t.Error("LeasePassed holds for a completed record")
	}
	if FinalState(422) != AttemptCompleted || FinalState(499) != AttemptIndeterminate || FinalState(500) != AttemptIndeterminate {
		t.Error("FinalState splits at the wrong status")
	}
}

func TestApprovalDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	decided := func(s ApprovalStatus) Approval {
		by := "bob"
		return Approval{ID: "a", Status: s, DecidedBy: &by, DecidedAt: &t0, ExpiresAt: t0.Add(time.Hour)}
	}
	tests := []struct {
		name    string
		a       Approval
		approve bool
		changed bool
		code    Code
		status  ApprovalStatus
	}{
		{"approve pending", Approval{Status: ApprovalPending, ExpiresAt: t0.Add(time.Hour)}, true, true, "", ApprovalApproved},
		{"reject pending", Approval{Status: ApprovalPending, ExpiresAt: t0.Add(time.Hour)}, false, true, "", ApprovalRejected},
		{"approve expired pending", Approval{Status: ApprovalPending, ExpiresAt: t0}, true, false, CodeApprovalExpired, ApprovalExpired},
		{"approve approved", decided(ApprovalApproved), true, false, "", ApprovalApproved},
		{"approve consumed", decided(ApprovalConsumed), true, false, "", ApprovalConsumed},
		{"approve expired approved", decided(ApprovalExpired), true, false, "", ApprovalExpired},
		{"reject approved", decided(ApprovalApproved), false, false, CodeApprovalAlreadyDecided, ApprovalApproved},
		{"reject consumed", decided(ApprovalConsumed), false, false, CodeApprovalAlreadyDecided, ApprovalConsumed},
		{"reject rejected", decided(ApprovalRejected), false, false, "", ApprovalRejected},
		{"approve rejected", decided(ApprovalRejected), true, false, CodeApprovalAlreadyDecided, ApprovalRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.a.Observe(t0)
			changed, err := a.Decide(Decision{Approve: tt.approve, By: "carol"}, t0)
			if changed != tt.changed || ErrorCode(err) != tt.code || a.Status != tt.status {
				t.Fatalf("Decide = changed %v, err %v, status %s", changed, err, a.Status)
			}
			if changed && (*a.DecidedBy != "carol" || !a.DecidedAt.Equal(t0)) {
				t.Fatalf("decision not recorded: %+v", a)
			}
		})
	}
}

func TestDeclare(t *testing.T) {
	d := Declare(codeTestConflict, "changed since")
	if d.Code != codeTestConflict || d.Status != 409 || d.Message != "changed since" {
		t.Fatalf("Declare = %+v", d)
	}
	if d := Declare(CodeNotFound, "no such thing"); d.Status != 404 {
		t.Fatalf("Declare(NOT_FOUND) = %+v", d)
	}
}

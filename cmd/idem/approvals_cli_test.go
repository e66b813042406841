package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

const (
	approvalJSON  = `{"id":"apr_1","operation":"order.refund","status":"approved","requestedBy":"agent-1","reason":"over 5000","decidedBy":"bob","decisionReason":"ok","fingerprint":"fp","input":{"amount":6000,"id":"ord_1"},"createdAt":"2026-01-02T03:04:05Z","expiresAt":"2026-01-02T03:19:05Z","decidedAt":"2026-01-02T03:05:00Z","consumedAt":null,"executionId":null}`
	executionJSON = `{"id":"exe_1","operation":"order.refund","principal":"agent-1","attempts":2,"outcome":"succeeded","code":null,"reinvocationOf":null,"startedAt":"2026-01-02T03:04:05Z","finishedAt":"2026-01-02T03:04:06Z","events":[{"type":"execution.started","at":"2026-01-02T03:04:05Z","attempt":1},{"type":"execution.retried","at":"2026-01-02T03:04:05.5Z","attempt":2,"previousErrorCode":"TIMEOUT"},{"type":"execution.succeeded","at":"2026-01-02T03:04:06Z","attempts":2}]}`
	attemptJSON   = `{"key":"tenant/k1","operation":"order.refund","state":"completed","fingerprint":"fp","executionId":"exe_1","status":200,"createdAt":"2026-01-02T03:04:05Z","completedAt":"2026-01-02T03:04:06Z","expiresAt":"2026-01-03T03:04:05Z"}`
)

func TestSystemCommands(t *testing.T) {
	var mu sync.Mutex
	var got []string
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.EscapedPath()+"?"+r.URL.RawQuery+" "+body+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/approvals":
			io.WriteString(w, `{"data":[`+approvalJSON+`]}`)
		case r.URL.Path == "/v1/approvals/apr_404":
			writeProblem(w, 404, "APPROVAL_NOT_FOUND", false, `{}`)
		case strings.HasPrefix(r.URL.Path, "/v1/approvals/"):
			io.WriteString(w, `{"data":`+approvalJSON+`}`)
		case strings.HasPrefix(r.URL.Path, "/v1/executions/"):
			io.WriteString(w, `{"data":`+executionJSON+`}`)
		case strings.HasPrefix(r.URL.Path, "/v1/attempts/"):
			io.WriteString(w, `{"data":`+attemptJSON+`}`)
		}
	})
	env := f.env(t)
	env["IDEM_TOKEN"] = "demo-approver"
	tests := []struct {
		args    []string
		request string
		stdout  string
	}{
		{[]string{"approvals", "list", "--status", "pending"}, "GET /v1/approvals?status=pending ", `{"data":[` + approvalJSON + `]}` + "\n"},
		{[]string{"approvals", "show", "apr_1"}, "GET /v1/approvals/apr_1? ", `{"data":` + approvalJSON + "}\n"},
		{[]string{"approvals", "approve", "apr_1", "--reason", "ok"}, `POST /v1/approvals/apr_1/approve? {"reason":"ok"}`, `{"data":` + approvalJSON + "}\n"},
		{[]string{"approvals", "reject", "apr_1"}, "POST /v1/approvals/apr_1/reject? ", `{"data":` + approvalJSON + "}\n"},
		{[]string{"executions", "show", "exe_1"}, "GET /v1/executions/exe_1? ", `{"data":` + executionJSON + "}\n"},
		{[]string{"attempts", "show", "tenant/k1"}, "GET /v1/attempts/tenant%2Fk1? ", `{"data":` + attemptJSON + "}\n"},
	}
	for _, tt := range tests {
		mu.Lock()
		got = nil
		mu.Unlock()
		code, stdout, stderr := run(t, env, tt.args...)
		if code != 0 || stdout != tt.stdout {
			t.Fatalf("idem %v = exit %d\nstdout %q\nstderr %q", tt.args, code, stdout, stderr)
		}
		mu.Lock()
		if len(got) != 1 || got[0] != tt.request+" Bearer demo-approver" {
			t.Fatalf("idem %v sent %q, want %q", tt.args, got, tt.request)
		}
		mu.Unlock()

		code, stdout, stderr = run(t, env, append(tt.args, "--format", "table")...)
		if code != 0 || strings.HasPrefix(stdout, "{") || !strings.Contains(stdout, "order.refund") {
			t.Fatalf("idem %v --format table = exit %d\n%s%s", tt.args, code, stdout, stderr)
		}
	}

	code, stdout, stderr := run(t, env, "approvals", "show", "apr_404")
	if code != exitError || !strings.Contains(stdout, `"code":"APPROVAL_NOT_FOUND"`) || !strings.HasPrefix(stderr, "Error [APPROVAL_NOT_FOUND]: ") {
		t.Fatalf("unknown approval: exit %d, %q, %q", code, stdout, stderr)
	}
	_, stdout, _ = run(t, env, "executions", "show", "exe_1", "--format", "table")
	if !strings.Contains(stdout, "execution.retried") || !strings.Contains(stdout, "after TIMEOUT") {
		t.Fatalf("execution table:\n%s", stdout)
	}
}

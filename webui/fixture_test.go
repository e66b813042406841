package webui

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
)

var (
	agent    = idem.Principal{Org: "acme", ID: "agent-1", Kind: idem.KindAgent}
	alice    = idem.Principal{Org: "acme", ID: "alice", Kind: idem.KindBrowser}
	bob      = idem.Principal{Org: "acme", ID: "bob", Kind: idem.KindCLISession, Roles: []string{idem.RoleApprover}}
	outsider = idem.Principal{Org: "globex", ID: "gina", Kind: idem.KindBrowser, Roles: []string{idem.RoleApprover}}
	tokens   = map[string]idem.Principal{"t-agent": agent, "t-alice": alice, "t-bob": bob, "t-gina": outsider}
)

type refundIn struct {
	ID     string `json:"id" in:"path"`
	Amount int    `json:"amount" jsonschema:"minimum=1"`
}

type refundOut struct {
	Refunded int `json:"refunded"`
}

var overLimit = idem.PolicyFor("refund-limit", func(ctx context.Context, p idem.Principal, in refundIn) (idem.PolicyDecision, error) {
	if in.Amount > 5000 {
		return idem.PolicyDecision{Effect: idem.RequireApproval, Reason: "refunds over 5000 need approval"}, nil
	}
	return idem.PolicyDecision{Effect: idem.Allow}, nil
})

// failingAmount makes order.refund fail with ALREADY_REFUNDED, whose
// message holds markup.
const failingAmount = 13

// codeAlreadyRefunded is the fixture application's business code,
// registered the way an application registers its own.
const codeAlreadyRefunded idem.Code = "ALREADY_REFUNDED"

func init() {
	idem.RegisterCodes(map[idem.Code]idem.CodeInfo{
		codeAlreadyRefunded: {Status: 409, Title: "Already refunded", Action: "Run order.show to see the order's refunds."},
	})
}

// fixture is a console over a real runner and SQLite store, with a fake
// clock for sessions.
type fixture struct {
	t       *testing.T
	runner  *pipeline.Runner
	clock   *fakeclock.Clock
	handler http.Handler
	// store and storeClock are the runner's store and its own clock.
	store      idem.Store
	storeClock *laterClock
}

// laterClock is the system clock moved ahead by what a test advanced it.
type laterClock struct{ ahead atomic.Int64 }

func (c *laterClock) Now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

// Advance moves the clock ahead by d.
func (c *laterClock) Advance(d time.Duration) { c.ahead.Add(int64(d)) }

func newFixture(t *testing.T) *fixture {
	t.Helper()
	storeClock := &laterClock{}
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{Clock: storeClock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	show := idem.Define(idem.Metadata{Name: "order.show", Method: "GET", Path: "/v1/orders/{id}", Summary: "Show an order", SideEffect: idem.SideEffectRead},
		func(ctx context.Context, call *idem.Call, in struct {
			ID string `json:"id" in:"path"`
		}) (refundOut, error) {
			return refundOut{}, nil
		})
	refund := idem.Define(idem.Metadata{
		Name: "order.refund", Method: "POST", Path: "/v1/orders/{id}/refund", Summary: "Refund an order", SideEffect: idem.SideEffectWrite,
		Retry:    idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "order.show", Rationale: "refunds once per key"},
		Approval: idem.ApprovalPolicy,
	}, func(ctx context.Context, call *idem.Call, in refundIn) (refundOut, error) {
		if in.Amount == failingAmount {
			return refundOut{}, idem.Errorf(codeAlreadyRefunded, "<script>alert(1)</script> was refunded\non 2026-11-30")
		}
		return refundOut{Refunded: in.Amount}, nil
	}).WithPolicies(overLimit)
	reg, err := idem.NewRegistry(show, refund)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	clock := fakeclock.New(time.Now())
	h := New(Config{Runner: runner, Auth: httpapi.NewTokens(tokens), Clock: clock, Logger: logger,
		IdleTimeout: 10 * time.Minute, AbsoluteTimeout: time.Hour})
	return &fixture{t: t, runner: runner, clock: clock, handler: h, store: store, storeClock: storeClock}
}

// refund calls order.refund as p with key and returns the answer's JSON.
func (f *fixture) refund(p idem.Principal, amount int, key string) map[string]any {
	f.t.Helper()
	body, _ := json.Marshal(map[string]int{"amount": amount})
	req := idem.Invocation{Operation: "order.refund", Principal: p, Intent: idem.Intent{PathParams: map[string]string{"id": "ord_1"}, Body: body}}
	if key != "" {
		req.Key = key
	}
	resp := f.runner.Call(f.t.Context(), req)
	var out map[string]any
	if err := json.Unmarshal(resp.Body(), &out); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// requestApproval has p ask for a refund that needs approval and returns
// the approval id.
func (f *fixture) requestApproval(p idem.Principal, key string) string {
	f.t.Helper()
	out := f.refund(p, 6000, key)
	details, _ := out["details"].(map[string]any)
	id, _ := details["approvalId"].(string)
	if id == "" {
		f.t.Fatalf("no approval requested: %v", out)
	}
	return id
}

// answer is one console response.
type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) location() string { return a.header.Get("Location") }

// do sends a request to the console; headers alternate name, value.
func (f *fixture) do(method, target string, form url.Values, cookie string, headers ...string) answer {
	f.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: cookieName, Value: cookie})
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "TLS" {
			r.TLS = &tls.ConnectionState{}
			continue
		}
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	return answer{status: w.Code, header: w.Header(), body: w.Body.String()}
}

// signin signs in with token and returns the session cookie's value.
func (f *fixture) signin(token string) string {
	f.t.Helper()
	a := f.do("POST", "/ui/signin", url.Values{"token": {token}}, "")
	if a.status != http.StatusSeeOther {
		f.t.Fatalf("sign-in with %s: %d %s", token, a.status, a.body)
	}
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == cookieName {
			return c.Value
		}
	}
	f.t.Fatalf("sign-in set no %s cookie: %v", cookieName, a.header)
	return ""
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the CSRF token from a page the session renders.
func (f *fixture) csrf(cookie string) string {
	f.t.Helper()
	a := f.do("GET", "/ui/approvals", nil, cookie)
	m := csrfInput.FindStringSubmatch(a.body)
	if m == nil {
		f.t.Fatalf("no CSRF token on the page: %d %s", a.status, a.body)
	}
	return m[1]
}

// wantError fails unless a is the error page for status and code.
func wantError(t *testing.T, a answer, status int, code idem.Code) {
	t.Helper()
	if a.status != status || !strings.Contains(a.body, `id="error-code">`+string(code)+`<`) {
		t.Fatalf("got %d, want the %d %s error page: %s", a.status, status, code, a.body)
	}
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("error page Content-Type = %q", ct)
	}
}

package pipeline_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
)

// valuesIn has a field of every kind the input rules treat apart.
type valuesIn struct {
	ID     string         `json:"id" in:"path"`
	N      int64          `json:"n,omitempty"`
	Small  int8           `json:"small,omitempty"`
	Count  uint32         `json:"count,omitempty"`
	Ratio  float64        `json:"ratio,omitempty"`
	Text   string         `json:"text,omitempty"`
	Items  []valuesItem   `json:"items,omitempty"`
	Extra  map[string]any `json:"extra,omitempty"`
	Page   int            `json:"page,omitempty" in:"query"`
	Filter string         `json:"filter,omitempty" in:"query"`
}

type valuesItem struct {
	Q int16 `json:"q"`
}

// valuesOp records the input its handler gets.
func valuesOp(mu *sync.Mutex, got *[]valuesIn) idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "value.put", Method: "POST", Path: "/v1/values/{id}", Summary: "Put a value", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "thing.show", Rationale: "records once per key"},
	}, func(ctx context.Context, call *idem.Call, in valuesIn) (valuesIn, error) {
		mu.Lock()
		*got = append(*got, in)
		mu.Unlock()
		return in, nil
	})
}

// TestInputValueRules: every value of the input, at any depth and from the
// body, the path or the query, is one that the fingerprint and a store hold
// as sent (SPEC §6.2), and every decode error speaks JSON paths and schema
// terms.
func TestInputValueRules(t *testing.T) {
	const outside = "is outside the exactly representable range ±9007199254740991 (I-JSON); send it as a string if the schema declares a string"
	const nul = "strings must not contain the NUL character (U+0000)"
	refused := []struct {
		name  string
		path  map[string]string
		query url.Values
		body  string
		at    string // details.errors[0].path
		msg   string // in details.errors[0].message
	}{
		{name: "integer 2^53+1", body: `{"n":9007199254740993}`, at: "/n", msg: "integer 9007199254740993 " + outside},
		{name: "integer 2^53", body: `{"n":9007199254740992}`, at: "/n", msg: "integer 9007199254740992 " + outside},
		{name: "integer -(2^53+1)", body: `{"n":-9007199254740993}`, at: "/n", msg: "integer -9007199254740993 " + outside},
		{name: "2^53+1 as a decimal", body: `{"n":9007199254740993.0}`, at: "/n", msg: "number 9007199254740993.0 " + outside},
		{name: "2^53+1 with an exponent", body: `{"n":9.007199254740993e15}`, at: "/n", msg: "number 9.007199254740993e15 " + outside},
		{name: "beyond a double", body: `{"ratio":1e400}`, at: "/ratio", msg: "number 1e400 " + outside},
		{name: "beyond the range in a number field", body: `{"ratio":1e20}`, at: "/ratio", msg: outside},
		{name: "big integer nested in an array", body: `{"items":[{"q":1},{"q":18446744073709551616}]}`, at: "/items/1/q", msg: outside},
		{name: "big integer in a free-form object", body: `{"extra":{"a":[12345678901234567890]}}`, at: "/extra/a/0", msg: outside},
		{name: "integer with a fraction", body: `{"n":5.5}`, at: "/n", msg: "must be integer, got number"},
		{name: "NUL in a string", body: `{"text":"a\u0000b"}`, at: "/text", msg: nul},
		{name: "NUL in a nested string", body: `{"extra":{"k":["x","\u0000"]}}`, at: "/extra/k/1", msg: nul},
		{name: "NUL in a member name", body: `{"extra":{"k\u0000":1}}`, at: "/extra/k\x00", msg: nul},
		{name: "invalid UTF-8 in a string", body: "{\"text\":\"\xff\"}", at: "/text", msg: "invalid UTF-8"},
		{name: "duplicate member name", body: `{"extra":{"k":1,"k":2}}`, at: "/extra/k", msg: `duplicate key "k"`},
		{name: "data after the body", body: `{"n":1} x`, at: "", msg: "unexpected data after the JSON value (at byte 8)"},
		{name: "NUL in a path parameter", path: map[string]string{"id": "a\x00"}, at: "/id", msg: nul},
		{name: "invalid UTF-8 in a path parameter", path: map[string]string{"id": "a\xff"}, at: "/id", msg: "valid UTF-8"},
		{name: "NUL in a query value", query: url.Values{"filter": {"x\x00"}}, at: "/filter", msg: nul},
		{name: "big integer in the query", query: url.Values{"page": {"9007199254740993"}}, at: "/page", msg: "integer 9007199254740993 " + outside},
		{name: "fraction in an integer query parameter", query: url.Values{"page": {"1.5"}}, at: "/page", msg: `want an integer, got "1.5"`},
		{name: "word in an integer query parameter", query: url.Values{"page": {"two"}}, at: "/page", msg: `want an integer, got "two"`},
		{name: "int8 overflow", body: `{"small":300}`, at: "/small", msg: "must be an integer from -128 to 127, got 300"},
		{name: "nested int16 overflow", body: `{"items":[{"q":1},{"q":40000}]}`, at: "/items/1/q", msg: "must be an integer from -32768 to 32767, got 40000"},
		{name: "negative unsigned", body: `{"count":-1}`, at: "/count", msg: "must be an integer from 0 to 4294967295, got -1"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []valuesIn
			f := newFixture(t, []idem.Operation{valuesOp(&mu, &got), showOp()})
			path := tt.path
			if path == nil {
				path = map[string]string{"id": "v1"}
			}
			body := any(tt.body)
			if tt.body == "" {
				body = nil
			}
			d := expect(t, f.do(t.Context(), call{op: "value.put", path: path, query: tt.query, body: body, key: "k"}), 400, idem.CodeInvalidInput)
			errs, _ := d.Details["errors"].([]any)
			if len(errs) == 0 {
				t.Fatalf("no details.errors: %v", d.Details)
			}
			first := errs[0].(map[string]any)
			msg, _ := first["message"].(string)
			if first["path"] != tt.at || !strings.Contains(msg, tt.msg) {
				t.Errorf("details.errors[0] = %q: %q; want %q: %q", first["path"], msg, tt.at, tt.msg)
			}
			for _, goWords := range []string{"int64", "int8", "int16", "uint32", "Go struct", "json:", "unmarshal", "valuesIn"} {
				if strings.Contains(msg, goWords) {
					t.Errorf("message %q shows %q", msg, goWords)
				}
			}
			if _, err := f.store.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: agent.Scope(), Key: "k"}); err == nil {
				t.Errorf("the key was consumed by a refused input")
			}
			if len(got) != 0 {
				t.Errorf("the handler ran with %+v", got)
			}
		})
	}

	accepted := []struct {
		name  string
		query url.Values
		body  string
		want  valuesIn
	}{
		{name: "2^53-1", body: `{"n":9007199254740991}`, want: valuesIn{N: 9007199254740991}},
		{name: "-(2^53-1)", body: `{"n":-9007199254740991}`, want: valuesIn{N: -9007199254740991}},
		{name: "5.0 is 5", body: `{"n":5.0}`, want: valuesIn{N: 5}},
		{name: "5e0 is 5", body: `{"n":5e0}`, want: valuesIn{N: 5}},
		{name: "1e6 is 1000000", body: `{"n":1e6}`, want: valuesIn{N: 1000000}},
		{name: "50e-1 is 5", body: `{"small":50e-1}`, want: valuesIn{Small: 5}},
		{name: "-0 is 0", body: `{"n":-0,"ratio":-0.0}`, want: valuesIn{}},
		{name: "nested integer spelled as a decimal", body: `{"items":[{"q":7.00}]}`, want: valuesIn{Items: []valuesItem{{Q: 7}}}},
		{name: "fraction in a number field", body: `{"ratio":0.1}`, want: valuesIn{Ratio: 0.1}},
		{name: "integer query parameter spelled as a decimal", query: url.Values{"page": {"2.0"}}, want: valuesIn{Page: 2}},
		{name: "integer query parameter with an exponent", query: url.Values{"page": {"3e0"}}, want: valuesIn{Page: 3}},
		{name: "U+0001 and a backslash-u text", body: `{"text":"\u0001\\u0000"}`, want: valuesIn{Text: "\x01\\u0000"}},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []valuesIn
			f := newFixture(t, []idem.Operation{valuesOp(&mu, &got), showOp()})
			body := any(tt.body)
			if tt.body == "" {
				body = nil
			}
			expect(t, f.do(t.Context(), call{op: "value.put", path: map[string]string{"id": "v1"}, query: tt.query, body: body, key: "k"}), 200, "")
			tt.want.ID = "v1"
			if len(got) != 1 || !jsonEqual(mustJSON(t, got[0]), mustJSON(t, tt.want)) {
				t.Errorf("the handler got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestIntegerSpellingsAreOneIntent: a key first used with 5.0 runs it as 5,
// and 5, 5e0 and 50e-1 under that key replay it (one fingerprint, one
// value).
func TestIntegerSpellingsAreOneIntent(t *testing.T) {
	var mu sync.Mutex
	var got []valuesIn
	f := newFixture(t, []idem.Operation{valuesOp(&mu, &got), showOp()})
	first := expect(t, f.do(t.Context(), call{op: "value.put", path: map[string]string{"id": "v1"}, body: `{"n":5.0}`, key: "k"}), http.StatusOK, "")
	for _, body := range []string{`{"n":5}`, `{"n":5e0}`, `{"n":50e-1}`, `{ "n" : 5.000 }`} {
		again := expect(t, f.do(t.Context(), call{op: "value.put", path: map[string]string{"id": "v1"}, body: body, key: "k"}), http.StatusOK, "")
		if !again.Meta.Idempotency.Replayed || again.Meta.ExecutionID != first.Meta.ExecutionID {
			t.Errorf("%s under the key of 5.0 is not its replay: %+v", body, again.Meta)
		}
	}
	if len(got) != 1 || got[0].N != 5 {
		t.Fatalf("the handler ran %d times with %+v, want once with n=5", len(got), got)
	}
	expect(t, f.do(t.Context(), call{op: "value.put", path: map[string]string{"id": "v1"}, body: `{"n":6}`, key: "k"}), 422, idem.CodeIdempotencyKeyReused)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The runner's system calls never hand PostgreSQL text it cannot hold: a
// NUL in an id finds nothing, in a filter matches nothing, in a decision's
// reason is INVALID_INPUT (SPEC §6.2); none is STORE_UNAVAILABLE or
// INTERNAL.
func TestSystemCallsRefuseTextNoStoreHolds(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	var runs atomic.Int64
	f := newFixtureOn(t, clock, newPGStores(t, clock, 1)[0], []idem.Operation{createOp(&runs), showOp()})
	ctx := t.Context()
	if _, err := f.runner.GetApproval(ctx, approver, "apr_\x00"); idem.ErrorCode(err) != idem.CodeApprovalNotFound {
		t.Errorf("GetApproval with a NUL: %v, want APPROVAL_NOT_FOUND", err)
	}
	if _, err := f.runner.DecideApproval(ctx, approver, "apr_\x00", true, "ok"); idem.ErrorCode(err) != idem.CodeApprovalNotFound {
		t.Errorf("DecideApproval of an id with a NUL: %v, want APPROVAL_NOT_FOUND", err)
	}
	_, err := f.runner.DecideApproval(ctx, approver, "apr_x", true, "fine\x00")
	if e := idem.AsError(err); e.Code != idem.CodeInvalidInput || !strings.Contains(e.Message, "/reason: strings must not contain the NUL character") {
		t.Errorf("DecideApproval with a NUL in the reason: %v, want INVALID_INPUT at /reason", err)
	}
	if _, err := f.runner.GetExecution(ctx, agent, "exe_\x00"); idem.ErrorCode(err) != idem.CodeNotFound {
		t.Errorf("GetExecution with a NUL: %v, want NOT_FOUND", err)
	}
	for _, p := range []idem.ListExecutionsParams{{Operation: "thing.create\x00"}, {Principal: "agent-1\x00"}} {
		if list, err := f.runner.ListExecutions(ctx, approver, p); err != nil || len(list) != 0 {
			t.Errorf("ListExecutions(%+v) = %v, %v; want none", p, list, err)
		}
	}
}

// TestInvalidInputListsBoundedErrors: a body with an error in each of its
// many items answers a bounded problem object that still counts them all.
func TestInvalidInputListsBoundedErrors(t *testing.T) {
	var mu sync.Mutex
	var got []valuesIn
	f := newFixture(t, []idem.Operation{valuesOp(&mu, &got), showOp()})
	items := make([]string, 5000)
	for i := range items {
		items[i] = `{"q":"not a number"}`
	}
	resp := f.do(context.Background(), call{op: "value.put", path: map[string]string{"id": "a"}, body: `{"items":[` + strings.Join(items, ",") + `]}`, key: "k-many"})
	var p struct {
		Code    idem.Code `json:"code"`
		Detail  string    `json:"detail"`
		Details struct {
			Errors []map[string]string `json:"errors"`
		} `json:"details"`
	}
	if err := json.Unmarshal(resp.Body(), &p); err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusBadRequest || p.Code != idem.CodeInvalidInput {
		t.Fatalf("status %d code %s, want 400 INVALID_INPUT", resp.Status, p.Code)
	}
	if len(p.Details.Errors) != 100 || !strings.Contains(p.Detail, "and 4999 more; details.errors lists the first 100") {
		t.Fatalf("%d errors listed, detail %q; want the first 100 and a count of all 5000", len(p.Details.Errors), p.Detail)
	}
	if len(got) != 0 {
		t.Fatal("the handler ran")
	}
}

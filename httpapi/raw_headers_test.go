package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/pipeline"
)

// A raw operation's answer (idem proxy's upstream) may carry headers of
// idem's own: a fresh execution must not tell its caller it is a replay,
// another execution or an applied preference. Over HTTP only idem sets
// them, from what the runner says of the answer.
func TestRawAnswerCannotForgeIdemHeaders(t *testing.T) {
	var calls atomic.Int64
	forged := http.Header{
		"Content-Type":                {"application/json"},
		"Location":                    {"/things/t1"},
		idem.HeaderIdempotentReplayed: {"true"},
		idem.HeaderExecutionID:        {"exe_forged"},
		idem.HeaderPreferenceApplied:  {"wait=5"},
	}
	op := idem.DefineRaw(idem.Metadata{
		Name: "createThing", Method: "POST", Path: "/things", Summary: "Create a thing", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "showThing", Rationale: "r"},
	}, idem.RawSpec{Unvalidated: true, Handler: func(ctx context.Context, call *idem.Call, req idem.RawRequest) (idem.RawResponse, error) {
		calls.Add(1)
		return idem.RawResponse{Status: 201, Header: forged.Clone(), Body: []byte(`{"id":"t1"}`)}, nil
	}})
	show := idem.DefineRaw(idem.Metadata{
		Name: "showThing", Method: "GET", Path: "/things/{id}", Summary: "Show a thing", SideEffect: idem.SideEffectRead,
		Retry: idem.RetryContract{Kind: idem.RetryFreshRead, Rationale: "r"},
	}, idem.RawSpec{Params: []idem.Param{{Name: "id", In: "path", Type: "string"}}, Unvalidated: true,
		Handler: func(ctx context.Context, call *idem.Call, req idem.RawRequest) (idem.RawResponse, error) {
			return idem.RawResponse{Status: 200, Body: []byte(`{}`)}, nil
		}})
	reg, err := idem.NewRegistry(op, show)
	if err != nil {
		t.Fatal(err)
	}
	store := sqliteStore(t, fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)))
	quiet := slog.New(slog.DiscardHandler)
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	auth := httpapi.NewTokens(map[string]idem.Principal{tokenAgent: {Org: "acme", ID: "agent-1", Kind: idem.KindAgent}})
	ts := httptest.NewServer(httpapi.NewHandler(httpapi.Config{Runner: runner, Store: store, Auth: auth, Logger: quiet, Version: "test", MaxBodyBytes: 4096}))
	t.Cleanup(ts.Close)

	send := func(key string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL+"/things", strings.NewReader(`{"name":"a"}`))
		req.Header.Set("Authorization", "Bearer "+tokenAgent)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idem.HeaderIdempotencyKey, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	first, body := send("k-raw")
	if first.StatusCode != 201 || string(body) != `{"id":"t1"}` || first.Header.Get("Location") != "/things/t1" {
		t.Fatalf("first answer %d %v %s", first.StatusCode, first.Header, body)
	}
	exe := first.Header.Get(idem.HeaderExecutionID)
	if !strings.HasPrefix(exe, "exe_") || exe == "exe_forged" || first.Header.Get(idem.HeaderIdempotentReplayed) != "" || first.Header.Get(idem.HeaderPreferenceApplied) != "" {
		t.Fatalf("a fresh execution carries the upstream's idem headers: %v", first.Header)
	}
	again, body := send("k-raw")
	if again.StatusCode != 201 || string(body) != `{"id":"t1"}` || again.Header.Get(idem.HeaderIdempotentReplayed) != "true" || again.Header.Get(idem.HeaderExecutionID) != exe {
		t.Fatalf("replay %d %v %s", again.StatusCode, again.Header, body)
	}
	if calls.Load() != 1 {
		t.Fatalf("the upstream ran %d times", calls.Load())
	}
	// A problem answered before any execution (a reused key) names none.
	req, _ := http.NewRequest("POST", ts.URL+"/things", strings.NewReader(`{"name":"b"}`))
	req.Header.Set("Authorization", "Bearer "+tokenAgent)
	req.Header.Set(idem.HeaderIdempotencyKey, "k-raw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Code idem.Code `json:"code"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || p.Code != idem.CodeIdempotencyKeyReused {
		t.Fatalf("reuse: %v, %v", p, err)
	}
	if resp.StatusCode != 422 || resp.Header.Get("Content-Type") != idem.ContentTypeProblem || resp.Header.Get(idem.HeaderExecutionID) != "" {
		t.Fatalf("reuse: %d %v", resp.StatusCode, resp.Header)
	}
}

package jwtauth_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/sqlitestore"
)

type whoamiIn struct{}

// TestHTTPAPI serves the HTTP API with the tokens file and a JWT
// authenticator chained: a valid JWT gets 200 and its principal, the
// tokens-file token too, and an expired JWT gets 401 UNAUTHENTICATED with
// a bearer challenge and a detail that says what is wrong.
func TestHTTPAPI(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1")
	is := newIssuer(t, rs)
	jwtAuth := newAuth(t, is.config(clock))
	tokens := httpapi.NewTokens(map[string]idem.Principal{"t-agent": {Org: "acme", ID: "agent-1", Kind: idem.KindAgent}})

	whoami := idem.Define(idem.Metadata{Name: "whoami.show", Method: "GET", Path: "/v1/whoami", Summary: "Who am I", SideEffect: idem.SideEffectRead},
		func(ctx context.Context, call *idem.Call, _ whoamiIn) (idem.Principal, error) {
			return call.Principal, nil
		})
	reg, err := idem.NewRegistry(whoami)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	quiet := slog.New(slog.DiscardHandler)
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Config{Runner: runner, Store: store, Auth: idem.Authenticators{tokens, jwtAuth}, Logger: quiet, Version: "test"}))
	t.Cleanup(srv.Close)

	get := func(token string) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/v1/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, body
	}

	for token, want := range map[string]string{
		rs.sign(t, claims(clock.Now(), map[string]any{"kind": "service_account", "roles": "approver"})): `{"org":"acme","id":"agent-7","kind":"service_account","roles":["approver"]}`,
		"t-agent": `{"org":"acme","id":"agent-1","kind":"agent"}`,
	} {
		status, _, body := get(token)
		var env struct {
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &env); status != 200 || err != nil || string(env.Data) != want {
			t.Fatalf("%d %s; want 200 with data %s", status, body, want)
		}
	}

	expired := rs.sign(t, claims(clock.Now().Add(-2*time.Hour), nil))
	status, h, body := get(expired)
	var problem struct {
		Type   string    `json:"type"`
		Code   idem.Code `json:"code"`
		Status int       `json:"status"`
		Detail string    `json:"detail"`
	}
	if err := json.Unmarshal(body, &problem); err != nil {
		t.Fatal(err)
	}
	t.Logf("an expired JWT: %d %s\nWWW-Authenticate: %s\n%s", status, h.Get("Content-Type"), h.Get("WWW-Authenticate"), body)
	if status != 401 || problem.Code != idem.CodeUnauthenticated || problem.Status != 401 ||
		!strings.Contains(problem.Detail, "the token expired at 2026-12-02T05:00:00Z (exp)") ||
		h.Get("Content-Type") != "application/problem+json" || h.Get("WWW-Authenticate") != `Bearer realm="idem", error="invalid_token"` {
		t.Fatalf("an expired JWT: %d %s %s", status, h, body)
	}
	if strings.Contains(string(body), expired) {
		t.Fatal("the problem echoes the token")
	}
}

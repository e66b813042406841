package httpapi_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/demo"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/sqlitestore"
)

// fuzzTarget is the demo application's HTTP surface on SQLite, built once
// per fuzzing process.
type fuzzTarget struct {
	handler http.Handler
	codes   map[string]bool
}

// noNetwork refuses every outgoing request (webhook deliveries).
type noNetwork struct{}

func (noNetwork) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("fuzzing: no network")
}

func newFuzzTarget(dir string) (*fuzzTarget, error) {
	ctx := context.Background()
	storeURL := "sqlite:" + filepath.Join(dir, "idem.db")
	store, err := sqlitestore.Open(ctx, filepath.Join(dir, "idem.db"), idem.StoreConfig{})
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := secretbox.New(key)
	if err != nil {
		return nil, err
	}
	app, err := demo.Open(ctx, storeURL, demo.Config{Sealer: box, HTTPClient: &http.Client{Transport: noNetwork{}, Timeout: time.Second}})
	if err != nil {
		return nil, err
	}
	reg, err := idem.NewRegistry(app.Operations()...)
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Sealer: box, Logger: quiet, Policies: app.Policies()})
	if err != nil {
		return nil, err
	}
	auth := httpapi.NewTokens(nil)
	for token, p := range demo.Tokens() {
		auth.Add(token, p)
	}
	ft := &fuzzTarget{
		handler: httpapi.NewHandler(httpapi.Config{
			Runner: runner, Store: store, Auth: auth, Logger: quiet, Version: "fuzz", Routes: app.Routes(),
			Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("# metrics\n")) }),
		}),
		codes: map[string]bool{},
	}
	for _, c := range idem.Codes() {
		ft.codes[string(c)] = true
	}
	for _, d := range runner.Descriptors() {
		for _, e := range d.Errors {
			ft.codes[string(e.Code)] = true
		}
	}
	return ft, nil
}

// FuzzRequest sends random methods, paths, queries, headers and bodies
// through the HTTP surface of the demo application: it never panics and
// always answers JSON with a status in 200–599 and, for a problem, a known
// code other than STORE_UNAVAILABLE and INTERNAL.
//
//	go test -run '^$' -fuzz FuzzRequest -fuzztime 2m ./httpapi/
func FuzzRequest(f *testing.F) {
	seeds := []struct{ method, path, token, key, prefer, body string }{
		{"POST", "/v1/businesses", "demo-agent", "k1", "", `{"slug":"acme","name":"Acme"}`},
		{"POST", "/v1/businesses", "demo-agent", "k1", "", `{"slug":"acme","name":"Other"}`},
		{"POST", "/v1/businesses", "demo-agent", "", "", `{"slug":"x","name":"X"}`},
		{"POST", "/v1/businesses", "demo-agent", "a b", "", `{"slug":"x","name":"X"}`},
		{"POST", "/v1/businesses", "demo-agent", `"quoted"`, "wait=1", `{"slug":"q","name":"Q","name":"R"}`},
		{"POST", "/v1/businesses?x=1;y=2", "demo-agent", "k2", "", `{"slug":"y","name":"Y"} trailing`},
		{"GET", "/v1/businesses", "demo-agent", "", "", ""},
		{"GET", "/v1/businesses/acme", "demo-other-org", "", "", ""},
		{"PUT", "/v1/businesses/acme/backends?environment=preview&dryRun=true", "demo-agent", "", "", `{"url":"https://b.example"}`},
		{"POST", "/v1/subscriptions/sub_1/limits", "demo-agent", "", "", `{"subject":"api","quantity":1e400}`},
		{"POST", "/v1/tokens", "demo-agent", "mint", "", `{"name":"ci","scopes":["read"]}`},
		{"POST", "/v1/orders/ord_7/refund", "demo-agent", "refund", "", `{"amount":6000}`},
		{"POST", "/v1/approvals/apr_x/approve", "demo-approver", "", "", `{"reason":1}`},
		{"GET", "/v1/attempts/k1%2F..", "demo-agent", "", "", ""},
		{"GET", "/v1/executions/exe_%00", "demo-agent-2", "", "", ""},
		{"GET", "/v1/approvals?status=nope", "demo-agent", "", "", ""},
		{"DELETE", "/v1/tokens", "demo-agent", "", "", "[]"},
		{"POST", "/v1/businesses/acme/webhooks", "demo-agent", "wh", "", `{"url":"http://127.0.0.1:1/"}`},
		{"GET", "/v1/demo/gateway/ledger", "demo-agent", "", "", ""},
		{"GET", "/metrics", "", "", "", ""},
		{"GET", "/openapi.json", "", "", "", ""},
		{"PATCH", "/", "nope", "", "", "\xff\xfe"},
		{"POST", "/v1/service-accounts/sa_1/approve", "demo-approver", "", "", `{"a":` + strings.Repeat("[", 200)},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.token, s.key, s.prefer, []byte(s.body))
	}
	// f.Fuzz runs every input of this process before it returns, so the
	// store outlives them all.
	fuzzT, err := newFuzzTarget(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path, token, key, prefer string, body []byte) {
		if !validMethod(method) {
			method = "POST"
		}
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequest(method, "http://idem.test"+path, bytes.NewReader(body))
		if err != nil {
			return // not a request a server could receive
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for _, h := range []struct{ name, value string }{{"Idempotency-Key", key}, {"Prefer", prefer}} {
			if h.value == "" {
				continue
			}
			// Several values, as several header lines, split at '\n'.
			for _, v := range strings.Split(h.value, "\n") {
				req.Header.Add(h.name, v)
			}
		}
		req.Header.Set("Content-Type", "application/json")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		// An answer that takes much longer than the 5 s request context is a
		// hang: dump every goroutine to find it.
		watchdog := time.AfterFunc(20*time.Second, func() {
			buf := make([]byte, 8<<20)
			buf = buf[:runtime.Stack(buf, true)]
			_ = os.WriteFile(filepath.Join(os.TempDir(), fmt.Sprintf("idem-fuzz-hang-%d.txt", os.Getpid())), buf, 0o644)
		})
		fuzzT.handler.ServeHTTP(rec, req.WithContext(ctx))
		if !watchdog.Stop() {
			t.Fatalf("%s %q took over 20 s", method, path)
		}

		if rec.Code == http.StatusTemporaryRedirect {
			// ServeMux sends an unclean path ("/./x", "//x") to its
			// clean form, method and body kept; nothing runs.
			if loc := rec.Header().Get("Location"); loc == "" || strings.Contains(loc, "/./") || strings.Contains(loc, "//") {
				t.Fatalf("%s %q: 307 to %q", method, path, loc)
			}
			return
		}
		if rec.Code < 200 || rec.Code > 599 {
			t.Fatalf("%s %q: status %d", method, path, rec.Code)
		}
		ct := rec.Header().Get("Content-Type")
		if path == "/metrics" && method == "GET" {
			return
		}
		if !strings.Contains(ct, "json") {
			t.Fatalf("%s %q: Content-Type %q: %q", method, path, ct, rec.Body.Bytes())
		}
		if !utf8.Valid(rec.Body.Bytes()) || !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %q: body is not JSON: %q", method, path, rec.Body.Bytes())
		}
		if rec.Code >= 400 || strings.Contains(ct, "problem") {
			var p struct {
				Code   string `json:"code"`
				Status int    `json:"status"`
				Title  string `json:"title"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("%s %q: problem %q: %v", method, path, rec.Body.Bytes(), err)
			}
			if !fuzzT.codes[p.Code] || p.Status != rec.Code || p.Title == "" {
				t.Fatalf("%s %q: %d with problem %s", method, path, rec.Code, rec.Body.Bytes())
			}
			// The store is healthy: no input makes it look down, and no
			// input reaches it that it refuses (SPEC §6.2).
			if p.Code == string(idem.CodeStoreUnavailable) || p.Code == string(idem.CodeInternal) {
				t.Fatalf("%s %q %q: %s from a healthy store", method, path, body, rec.Body.Bytes())
			}
		}
	})
}

func validMethod(m string) bool {
	if m == "" || len(m) > 16 {
		return false
	}
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

package httpapi_test

import (
	"net/url"
	"testing"

	"github.com/idem-run/idem"
)

// SPEC §6.4: control parameters are parsed strictly. A dryRun other than
// exactly true or false given once, or a malformed Prefer: wait, is
// 400 INVALID_INPUT; nothing runs and the key is not consumed.
func TestControlParametersStrict(t *testing.T) {
	s := startServer(t, sqliteStore)
	create := "/v1/shops/acme/widgets"
	noRecord := func(t *testing.T, k string) {
		t.Helper()
		s.send(t, "GET", "/v1/attempts/"+url.PathEscape(k), tokenAgent, nil, "").expect(t, 404, idem.CodeNotFound)
	}
	for i, q := range []string{"dryRun=1", "dryRun=True", "dryRun=yes", "dryRun=", "dryRun", "dryRun=false&dryRun=true", "dryRun=true&dryRun=true", "dryRun=%20true"} {
		t.Run(q, func(t *testing.T) {
			k := "k-dry-" + string(rune('a'+i))
			for _, c := range []struct {
				method, path, token string
				headers             hdr
				body                string
			}{
				{"POST", create + "?" + q, tokenAgent, key(k), `{"name":"a"}`},
				{"POST", create + "?" + q, tokenBrowser, nil, `{"name":"a"}`},
				{"PUT", "/v1/shops/acme/bind?environment=preview&" + q, tokenAgent, nil, `{"url":"x"}`},
				{"GET", "/v1/shops/acme/widgets?" + q, tokenAgent, nil, ""},
			} {
				a := s.send(t, c.method, c.path, c.token, c.headers, c.body).expect(t, 400, idem.CodeInvalidInput)
				errs, _ := a.body.Details["errors"].([]any)
				if len(errs) != 1 || errs[0].(map[string]any)["path"] != "/dryRun" || a.body.Meta.DryRun {
					t.Fatalf("%s %s: %s", c.method, c.path, a.raw)
				}
			}
			if n := s.runs.Load(); n != 0 {
				t.Fatalf("?%s ran widget.create %d times", q, n)
			}
			noRecord(t, k)
		})
	}
	for i, prefer := range []string{"wait=abc", "wait=-1", "wait=1.5", "wait= ", "wait", "wait=1, wait=2", "respond-async, wait=10s"} {
		t.Run("Prefer "+prefer, func(t *testing.T) {
			k := "k-prefer-" + string(rune('a'+i))
			a := s.send(t, "POST", create, tokenAgent, hdr{"Idempotency-Key": {k}, "Prefer": {prefer}}, `{"name":"a"}`).expect(t, 400, idem.CodeInvalidInput)
			if a.body.Meta.Operation != "widget.create" || a.body.Details["errors"] == nil {
				t.Fatalf("Prefer: %s answered %s", prefer, a.raw)
			}
			if n := s.runs.Load(); n != 0 {
				t.Fatalf("Prefer: %s ran widget.create %d times", prefer, n)
			}
			noRecord(t, k)
		})
	}
	// Valid values run: dryRun=false live (and the same intent as no
	// dryRun), other preferences beside a valid wait ignored.
	first := s.send(t, "POST", create+"?dryRun=false", tokenAgent, hdr{"Idempotency-Key": {"k-live"}, "Prefer": {"respond-async, wait=5; x=y", "return=minimal"}}, `{"name":"a"}`).expect(t, 201, "")
	again := s.send(t, "POST", create, tokenAgent, key("k-live"), `{"name":"a"}`).expect(t, 201, "")
	if s.runs.Load() != 1 || !again.body.Meta.Idempotency.Replayed || again.body.Meta.ExecutionID != first.body.Meta.ExecutionID {
		t.Fatalf("dryRun=false, then no dryRun, under one key: %d runs, %s", s.runs.Load(), again.raw)
	}
	s.send(t, "PUT", "/v1/shops/acme/bind?environment=preview&dryRun=true", tokenAgent, nil, `{"url":"x"}`).expect(t, 200, "")
}

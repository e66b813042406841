package e2e

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/idem-run/idem/internal/pgtest"
)

func TestServeStartsAnswersAndStopsGracefully(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, "sqlite:"+filepath.Join(dir, "idem.db"), dir)
	s.do(t, "GET", "/readyz", "", "").want(t, 200, "")
	s.do(t, "GET", "/healthz", "", "").want(t, 200, "")
	cat := s.do(t, "GET", "/v1/operations", "", "").want(t, 200, "")
	if _, ok := cat.body["operations"].([]any); !ok {
		t.Fatalf("catalog = %s", cat.raw)
	}
	s.do(t, "GET", "/openapi.json", "", "").want(t, 200, "")
	s.do(t, "GET", "/v1/attempts/x", "", "").want(t, 401, "UNAUTHENTICATED")
	s.do(t, "GET", "/v1/attempts/x", "demo-agent", "").want(t, 404, "NOT_FOUND")
	metrics := s.do(t, "GET", "/metrics", "", "")
	if metrics.status != 200 || !bytes.Contains(metrics.raw, []byte("idem_store_duration_seconds")) {
		t.Fatalf("metrics = %d %.300s", metrics.status, metrics.raw)
	}
	if err := s.stop(t); err != nil {
		t.Fatalf("idem serve exited with %v after SIGTERM:\n%s", err, s.logs())
	}
}

func TestTwoServersShareOneCatalogOnPostgres(t *testing.T) {
	url := pgtest.NewDatabase(t)
	dir := t.TempDir()
	a, b := serve(t, url, dir), serve(t, url, dir)
	ca := a.do(t, "GET", "/v1/operations", "", "").want(t, 200, "")
	cb := b.do(t, "GET", "/v1/operations", "", "").want(t, 200, "")
	if !bytes.Equal(ca.raw, cb.raw) {
		t.Fatal("two instances answer different catalogs")
	}
	oa := a.do(t, "GET", "/openapi.json", "", "")
	ob := b.do(t, "GET", "/openapi.json", "", "")
	if !bytes.Equal(oa.raw, ob.raw) {
		t.Fatal("two instances answer different OpenAPI documents")
	}
}

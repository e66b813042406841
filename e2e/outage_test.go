package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem/internal/pgtest"
)

// A PostgreSQL outage under a running server: requests fail closed with
// 503 STORE_UNAVAILABLE and run nothing; once the database is back they
// succeed again without a restart.
func TestPostgresOutageFailsClosedAndRecovers(t *testing.T) {
	cluster := pgtest.StartCluster(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE outage"); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	url := cluster.URL()[:len(cluster.URL())-len("/postgres?sslmode=disable")] + "/outage?sslmode=disable"
	dir := t.TempDir()
	s := serve(t, url, dir)
	s.do(t, "GET", "/readyz", "", "").want(t, 200, "")

	cluster.Stop()
	s.do(t, "GET", "/readyz", "", "").want(t, 503, "STORE_UNAVAILABLE")
	down := s.do(t, "GET", "/v1/attempts/k-1", "demo-agent", "").want(t, 503, "STORE_UNAVAILABLE")
	if down.body["retryable"] != true || down.header.Get("Retry-After") == "" {
		t.Fatalf("503 = %s %v", down.raw, down.header)
	}

	refund := `{"amount":100}`
	s.do(t, "POST", "/v1/orders/ord_5/refund", "demo-agent", refund, "Idempotency-Key", "outage-1").want(t, 503, "STORE_UNAVAILABLE")

	cluster.Start()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := s.do(t, "GET", "/readyz", "", "")
		if r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not recover within 30 s of the database: %s", r.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.do(t, "GET", "/v1/attempts/k-1", "demo-agent", "").want(t, 404, "NOT_FOUND")
	// The refund refused during the outage ran nothing and consumed no key.
	for _, e := range ledgerEffects(t, s, "demo-agent") {
		if e["requestKey"] == "outage-1" {
			t.Fatalf("a refund refused with 503 reached the gateway: %v", e)
		}
	}
	s.do(t, "POST", "/v1/orders/ord_5/refund", "demo-agent", refund, "Idempotency-Key", "outage-1").want(t, 200, "")
}

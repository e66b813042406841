package httpapi_test

import (
	"strings"
	"testing"

	"github.com/idem-run/idem"
)

// TestHeaderAndBodyKeysThatDifferAreRefused: an HTTP call with an
// Idempotency-Key header and another idempotencyKey body member is
// refused as MCP refuses two different keys (IDEMPOTENCY_KEY_INVALID,
// naming both places), before anything runs: the key stays free (issue
// 33, Low). Before, the call ran under the header's key.
func TestHeaderAndBodyKeysThatDifferAreRefused(t *testing.T) {
	s := startServer(t, sqliteStore)
	const create = "/v1/shops/acme/widgets"
	for _, body := range []string{`{"name":"a","idempotencyKey":"k-other"}`, `{"idempotencyKey":7,"name":"a"}`, `{"name":"a","idempotencyKey":null}`} {
		r := s.send(t, "POST", create, tokenAgent, key("k-conflict"), body).expect(t, 400, idem.CodeIdempotencyKeyInvalid)
		if !strings.Contains(string(r.raw), "Idempotency-Key header") || !strings.Contains(string(r.raw), "body member idempotencyKey") {
			t.Fatalf("%s: the problem does not name both places: %s", body, r.raw)
		}
	}
	s.send(t, "POST", create, tokenAgent, key("k-conflict"), `{"name":"a"}`).expect(t, 201, "")
}

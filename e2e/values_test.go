package e2e

import (
	"strings"
	"testing"
)

// TestInputValues sends, on SQLite and PostgreSQL, values that a store
// cannot hold (NUL) and numbers that a double cannot carry exactly: each is
// 400 INVALID_INPUT at the value's path, and the key is not consumed (the
// same key with a valid request then runs). Integers in any spelling JSON
// Schema calls an integer are accepted and are one intent.
func TestInputValues(t *testing.T) {
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := serve(t, store(t, dir), dir)
			refused := []struct {
				name, method, path, body, key string
				errPath, message              string
				then                          string // a valid body for the same key (path stays)
				thenPath                      string
				thenStatus                    int
			}{
				{name: "NUL in a body string", method: "POST", path: "/v1/businesses", key: "nul-name",
					body: `{"slug":"nul-name","name":"a\u0000b"}`, errPath: "/name", message: "NUL character (U+0000)",
					then: `{"slug":"nul-name","name":"ab"}`, thenStatus: 201},
				{name: "NUL in a member name", method: "POST", path: "/v1/businesses", key: "nul-member",
					body: `{"slug":"nul-member","name":"n","x\u0000":1}`, errPath: "/x\x00", message: "NUL character (U+0000)",
					then: `{"slug":"nul-member","name":"n"}`, thenStatus: 201},
				{name: "NUL in a nested string", method: "POST", path: "/v1/orders/ord_2/refund", key: "nul-nested",
					body: `{"amount":100,"simulate":{"x":["\u0000"]}}`, errPath: "/simulate/x/0", message: "NUL character (U+0000)",
					then: `{"amount":100}`, thenStatus: 200},
				{name: "NUL in a path parameter", method: "POST", path: "/v1/orders/ord_1%00/refund", key: "nul-path",
					body: `{"amount":100}`, errPath: "/id", message: "NUL character (U+0000)",
					then: `{"amount":100}`, thenPath: "/v1/orders/ord_1/refund", thenStatus: 200},
				{name: "integer beyond 2^53", method: "POST", path: "/v1/orders/ord_3/refund", key: "big-int",
					body: `{"amount":9007199254740993}`, errPath: "/amount", message: "outside the exactly representable range ±9007199254740991",
					then: `{"amount":100}`, thenStatus: 200},
				{name: "integer beyond 2^53 in another spelling", method: "POST", path: "/v1/orders/ord_3/refund", key: "big-int-2",
					body: `{"amount":9.007199254740993e15}`, errPath: "/amount", message: "outside the exactly representable range ±9007199254740991",
					then: `{"amount":100}`, thenStatus: 200},
				{name: "number beyond a double", method: "POST", path: "/v1/orders/ord_3/refund", key: "huge",
					body: `{"amount":1e400}`, errPath: "/amount", message: "outside the exactly representable range ±9007199254740991",
					then: `{"amount":100}`, thenStatus: 200},
			}
			for _, c := range refused {
				t.Run(c.name, func(t *testing.T) {
					r := s.do(t, c.method, c.path, "demo-agent", c.body, "Idempotency-Key", c.key).want(t, 400, "INVALID_INPUT")
					errs, _ := r.get("details.errors").([]any)
					if len(errs) == 0 {
						t.Fatalf("no details.errors: %s", r.raw)
					}
					first := errs[0].(map[string]any)
					if first["path"] != c.errPath || !strings.Contains(first["message"].(string), c.message) {
						t.Fatalf("details.errors[0] = %v, want path %q and a message with %q", first, c.errPath, c.message)
					}
					s.do(t, "GET", "/v1/attempts/"+c.key, "demo-agent", "").want(t, 404, "NOT_FOUND")
					path := c.path
					if c.thenPath != "" {
						path = c.thenPath
					}
					s.do(t, c.method, path, "demo-agent", c.then, "Idempotency-Key", c.key).want(t, c.thenStatus, "")
				})
			}
			t.Run("NUL in a query value", func(t *testing.T) {
				s.do(t, "POST", "/v1/businesses", "demo-agent", `{"slug":"q-nul","name":"Q"}`, "Idempotency-Key", "q-nul").want(t, 201, "")
				r := s.do(t, "PUT", "/v1/businesses/q-nul/backends/web?environment=prev%00iew", "demo-agent", `{"originUrl":"https://b.example"}`).want(t, 400, "INVALID_INPUT")
				first := r.get("details.errors").([]any)[0].(map[string]any)
				if first["path"] != "/environment" || !strings.Contains(first["message"].(string), "NUL") {
					t.Fatalf("details.errors[0] = %v", first)
				}
			})
			t.Run("every spelling of an integer is that integer", func(t *testing.T) {
				first := s.do(t, "POST", "/v1/orders/ord_4/refund", "demo-agent", `{"amount":100.0}`, "Idempotency-Key", "spelling").want(t, 200, "")
				if got := first.get("data.refund.amount"); got != float64(100) {
					t.Fatalf("refund amount = %v: %s", got, first.raw)
				}
				for _, body := range []string{`{"amount":100}`, `{"amount":1e2}`, `{"amount":1.00e+2}`, `{"amount":10000e-2}`} {
					again := s.do(t, "POST", "/v1/orders/ord_4/refund", "demo-agent", body, "Idempotency-Key", "spelling").want(t, 200, "")
					if again.get("meta.idempotency.replayed") != true || again.get("meta.executionId") != first.get("meta.executionId") {
						t.Fatalf("%s under the key first used with 100.0 is not its replay: %s", body, again.raw)
					}
				}
				s.do(t, "POST", "/v1/orders/ord_5/refund", "demo-agent", `{"amount":5e0}`, "Idempotency-Key", "spelling-2").want(t, 200, "")
				r := s.do(t, "POST", "/v1/orders/ord_5/refund", "demo-agent", `{"amount":5.5}`, "Idempotency-Key", "spelling-3").want(t, 400, "INVALID_INPUT")
				for _, goName := range []string{"int64", "Go struct", "json:", "unmarshal"} {
					if strings.Contains(string(r.raw), goName) {
						t.Fatalf("the message shows %q: %s", goName, r.raw)
					}
				}
			})
		})
	}
}

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSecurity checks, on SQLite and PostgreSQL, that minted secrets never
// reach the database, the logs or the metrics in clear, that idempotency
// keys are not logged in clear, and that no principal can read, replay or
// probe another's attempts, executions or approvals.
func TestSecurity(t *testing.T) {
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			storeURL := store(t, dir)
			s := serve(t, storeURL, dir)
			t.Run("secrets never in clear", func(t *testing.T) { testSecretsNotInClear(t, s, name, storeURL, dir) })
			t.Run("scope isolation", func(t *testing.T) { testScopeIsolation(t, s, name) })
		})
	}
}

func testSecretsNotInClear(t *testing.T, s *server, kind, storeURL, dir string) {
	slug := "sec-" + kind
	s.do(t, "POST", "/v1/businesses", "demo-agent", `{"slug":"`+slug+`","name":"Sec"}`, "Idempotency-Key", "sec-create").want(t, 201, "")
	// A distinctive key: it must not appear in the logs (SPEC: logged only
	// as a keyed hash).
	const distinctiveKey = "zq-k3y-7f1c9e2b-never-logged"
	mint := s.do(t, "POST", "/v1/tokens", "demo-agent", `{"name":"ci","scopes":["read"]}`, "Idempotency-Key", distinctiveKey)
	if mint.status/100 != 2 {
		t.Fatalf("token.mint = %s", mint.raw)
	}
	hook := s.do(t, "POST", "/v1/businesses/"+slug+"/webhooks", "demo-agent",
		`{"url":"http://127.0.0.1:1/hook","events":["payment.failed"]}`, "Idempotency-Key", "sec-hook").want(t, 201, "")
	secrets := map[string]string{}
	for what, r := range map[string]reply{"token": mint, "webhook": hook} {
		sec, _ := r.get("data.secret").(string)
		if len(sec) < 16 {
			t.Fatalf("%s secret %q is missing or too short to grep for: %s", what, sec, r.raw)
		}
		secrets[what] = sec
	}
	// The secrets are replayable (sealed), and the replays change nothing.
	s.do(t, "POST", "/v1/tokens", "demo-agent", `{"name":"ci","scopes":["read"]}`, "Idempotency-Key", distinctiveKey)
	// Everything that is read back must not carry them either.
	places := map[string][]byte{
		"GET /metrics":         s.do(t, "GET", "/metrics", "", "").raw,
		"token.list":           s.do(t, "GET", "/v1/tokens", "demo-agent", "").raw,
		"webhook.list":         s.do(t, "GET", "/v1/businesses/"+slug+"/webhooks", "demo-agent", "").raw,
		"attempt (token)":      s.do(t, "GET", "/v1/attempts/"+distinctiveKey, "demo-agent", "").want(t, 200, "").raw,
		"attempt (webhook)":    s.do(t, "GET", "/v1/attempts/sec-hook", "demo-agent", "").want(t, 200, "").raw,
		"execution (token)":    s.do(t, "GET", "/v1/executions/"+mint.get("meta.executionId").(string), "demo-agent", "").want(t, 200, "").raw,
		"execution (webhook)":  s.do(t, "GET", "/v1/executions/"+hook.get("meta.executionId").(string), "demo-agent", "").want(t, 200, "").raw,
		"server stderr (logs)": []byte(s.logs()),
	}
	switch kind {
	case "sqlite":
		// The database file, its WAL and anything else the store wrote.
		files, _ := filepath.Glob(filepath.Join(dir, "idem.db*"))
		if len(files) == 0 {
			t.Fatalf("no database files in %s", dir)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			places[filepath.Base(f)] = b
		}
	case "postgres":
		for k, v := range pgColumns(t, storeURL) {
			places[k] = v
		}
	}
	checked := 0
	for place, b := range places {
		for what, sec := range secrets {
			if strings.Contains(string(b), sec) {
				t.Errorf("the %s secret is in clear in %s", what, place)
			}
		}
		checked += len(b)
	}
	if strings.Contains(s.logs(), distinctiveKey) {
		t.Errorf("the idempotency key %q is in clear in the logs", distinctiveKey)
	}
	t.Logf("%d places, %d bytes searched for %d secrets", len(places), checked, len(secrets))
}

// pgColumns reads every column of every table of the database as text
// (bytea in hex and, decoded, as bytes): a pg_dump without the binary.
func pgColumns(t *testing.T, dbURL string) map[string][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns
		WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2, 3`)
	if err != nil {
		t.Fatal(err)
	}
	type column struct{ schema, table, name, typ string }
	var cols []column
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.schema, &c.table, &c.name, &c.typ); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cols) == 0 {
		t.Fatal("no columns found in the PostgreSQL database")
	}
	out := map[string][]byte{}
	for _, c := range cols {
		ident := pgx.Identifier{c.schema, c.table}.Sanitize()
		col := pgx.Identifier{c.name}.Sanitize()
		expr := col + "::text"
		if c.typ == "bytea" {
			expr = col // scanned as the raw bytes
		}
		var all []byte
		rows, err := conn.Query(ctx, fmt.Sprintf("SELECT %s FROM %s", expr, ident))
		if err != nil {
			t.Fatalf("%s.%s: %v", ident, col, err)
		}
		for rows.Next() {
			var v []byte
			if err := rows.Scan(&v); err != nil {
				t.Fatalf("%s.%s: %v", ident, col, err)
			}
			all = append(append(all, v...), '\n')
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s.%s: %v", ident, col, err)
		}
		out["postgres "+ident+"."+col] = all
	}
	return out
}

// sameKeys reports whether two details objects have the same members.
func sameKeys(a, b any) bool {
	am, _ := a.(map[string]any)
	bm, _ := b.(map[string]any)
	if len(am) != len(bm) {
		return false
	}
	for k := range am {
		if _, ok := bm[k]; !ok {
			return false
		}
	}
	return true
}

// problemShape is what a "not yours" answer must share with a "not found"
// one.
func problemShape(r reply) string {
	return fmt.Sprintf("%d %v %v %v", r.status, r.body["code"], r.body["title"], r.body["type"])
}

func testScopeIsolation(t *testing.T, s *server, kind string) {
	slug := "iso-" + kind
	const key = "iso-key-1"
	body := `{"slug":"` + slug + `","name":"Iso"}`
	created := s.do(t, "POST", "/v1/businesses", "demo-agent", body, "Idempotency-Key", key).want(t, 201, "")
	execID := created.get("meta.executionId").(string)
	refund := s.do(t, "POST", "/v1/orders/ord_8/refund", "demo-agent", `{"amount":6000}`, "Idempotency-Key", "iso-refund").want(t, 403, "APPROVAL_REQUIRED")
	approvalID, _ := refund.get("details.approvalId").(string)
	if approvalID == "" {
		t.Fatalf("no approval id: %s", refund.raw)
	}
	// The owner sees them.
	s.do(t, "GET", "/v1/attempts/"+key, "demo-agent", "").want(t, 200, "")
	s.do(t, "GET", "/v1/executions/"+execID, "demo-agent", "").want(t, 200, "")
	s.do(t, "GET", "/v1/approvals/"+approvalID, "demo-agent", "").want(t, 200, "")

	probes := 0
	for _, other := range []string{"demo-agent-2", "demo-other-org", "demo-browser"} {
		for _, c := range []struct {
			name, method, yours, missing, body string
		}{
			{"attempt", "GET", "/v1/attempts/" + key, "/v1/attempts/iso-key-never-used", ""},
			{"attempt (refund)", "GET", "/v1/attempts/iso-refund", "/v1/attempts/iso-refund-never-used", ""},
			{"execution", "GET", "/v1/executions/" + execID, "/v1/executions/exe_" + strings.Repeat("a", len(execID)-4), ""},
			{"approval", "GET", "/v1/approvals/" + approvalID, "/v1/approvals/" + approvalID[:len(approvalID)-3] + "zzz", ""},
			{"approve", "POST", "/v1/approvals/" + approvalID + "/approve", "/v1/approvals/" + approvalID[:len(approvalID)-3] + "zzz/approve", `{"reason":"x"}`},
			{"reject", "POST", "/v1/approvals/" + approvalID + "/reject", "/v1/approvals/" + approvalID[:len(approvalID)-3] + "zzz/reject", ""},
		} {
			yours := s.do(t, c.method, c.yours, other, c.body)
			missing := s.do(t, c.method, c.missing, other, c.body)
			probes += 2
			if yours.status != 404 && yours.status != 403 {
				t.Errorf("%s: %s %s answers %d: %s", other, c.method, c.yours, yours.status, yours.raw)
			}
			if c.method == "POST" && other != "demo-other-org" {
				// SPEC §8 orders the checks on a decision: unknown →
				// 404 APPROVAL_NOT_FOUND before no approver role → 403
				// FORBIDDEN. A non-approver of the same org is refused
				// either way; it can tell an existing id from an unknown
				// one only by guessing a 128-bit random id.
				yours.want(t, 403, "FORBIDDEN")
				missing.want(t, 404, "APPROVAL_NOT_FOUND")
				continue
			}
			if problemShape(yours) != problemShape(missing) {
				t.Errorf("%s: %s tells another's from a missing one:\n  another's: %s\n  missing:   %s", other, c.name, yours.raw, missing.raw)
			}
			// Details may echo the caller's own input, nothing of the owner.
			yoursPath, _ := url.PathUnescape(c.yours)
			missingPath, _ := url.PathUnescape(c.missing)
			dy, _ := yours.body["detail"].(string)
			dm, _ := missing.body["detail"].(string)
			ys, ms := strings.Split(yoursPath, "/"), strings.Split(missingPath, "/")
			for i := range min(len(ys), len(ms)) {
				if ys[i] != ms[i] {
					dy, dm = strings.ReplaceAll(dy, ys[i], "ID"), strings.ReplaceAll(dm, ms[i], "ID")
				}
			}
			if dy != dm || !sameKeys(yours.get("details"), missing.get("details")) {
				t.Errorf("%s: %s details differ:\n  another's: %q\n  missing:   %q", other, c.name, dy, dm)
			}
			for _, leak := range []string{"agent-1", slug} {
				if strings.Contains(string(yours.raw), leak) {
					t.Errorf("%s: %s answer names %q: %s", other, c.name, leak, yours.raw)
				}
			}
		}
		list := s.do(t, "GET", "/v1/approvals", other, "").want(t, 200, "")
		if strings.Contains(string(list.raw), approvalID) {
			t.Errorf("%s lists agent-1's approval: %s", other, list.raw)
		}
	}
	// The approval is still pending: no one else decided it.
	if a := s.do(t, "GET", "/v1/approvals/"+approvalID, "demo-agent", "").want(t, 200, ""); a.get("data.status") != "pending" {
		t.Errorf("approval after the probes: %s", a.raw)
	}

	// The same key from another principal is its own attempt: never a
	// replay of agent-1's result, never a reuse conflict.
	other := s.do(t, "POST", "/v1/businesses", "demo-other-org", body, "Idempotency-Key", key).want(t, 201, "")
	if other.get("meta.idempotency.replayed") != false || other.header.Get("Idempotent-Replayed") != "" || other.get("meta.executionId") == execID || other.get("data.createdBy") != "agent-9" {
		t.Errorf("demo-other-org with agent-1's key: %s", other.raw)
	}
	same := s.do(t, "POST", "/v1/businesses", "demo-agent-2", body, "Idempotency-Key", key).want(t, 409, "BUSINESS_EXISTS")
	if same.get("meta.idempotency.replayed") != false || same.get("meta.executionId") == execID {
		t.Errorf("demo-agent-2 with agent-1's key: %s", same.raw)
	}
	s.do(t, "POST", "/v1/businesses", "demo-agent-2", `{"slug":"`+slug+`-2","name":"Other intent"}`, "Idempotency-Key", "iso-key-2").want(t, 201, "")
	// agent-1's record is untouched: still its own, still a replay.
	again := s.do(t, "POST", "/v1/businesses", "demo-agent", body, "Idempotency-Key", key).want(t, 201, "")
	if again.get("meta.idempotency.replayed") != true || again.get("meta.executionId") != execID {
		t.Errorf("agent-1's replay after the others: %s", again.raw)
	}
	t.Logf("%d cross-scope probes", probes)
}

// TestKeyFileMode: the secret key file is created 0600, and a server
// refuses to start on one readable by group or others.
func TestKeyFileMode(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, "sqlite:"+filepath.Join(dir, "idem.db"), dir)
	keyFile := filepath.Join(dir, "idem.key")
	fi, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %04o, want 0600", fi.Mode().Perm())
	}
	if err := s.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		if err := os.Chmod(keyFile, mode); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, binary, "serve", "--demo", "--addr", "127.0.0.1:0", "--store", "sqlite:"+filepath.Join(dir, "idem.db"), "--secret-key-file", keyFile)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "IDEM_STORE=", "IDEM_ADDR=")
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil || cmd.ProcessState == nil || cmd.ProcessState.ExitCode() <= 0 {
			t.Fatalf("mode %04o: serve did not exit non-zero (%v):\n%s", mode, err, out)
		}
		if !strings.Contains(string(out), "chmod 600 "+keyFile) || strings.Contains(string(out), "listening on") {
			t.Fatalf("mode %04o: no chmod hint:\n%s", mode, out)
		}
	}
}

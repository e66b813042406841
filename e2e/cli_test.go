package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem/internal/pgtest"
)

// cli runs the built idem binary as one agent: a server, a token and a
// private attempt journal (IDEM_JOURNAL in a temporary directory).
type cli struct {
	server  string
	token   string
	journal string
}

func newCLI(t *testing.T, server string) *cli {
	return &cli{server: server, token: "demo-agent", journal: filepath.Join(t.TempDir(), "journal")}
}

// ran is one finished CLI run.
type ran struct {
	args           []string
	code           int
	stdout, stderr string
	body           map[string]any
}

// command builds the CLI command; its stdout is a pipe, so --format json
// is the default.
func (c *cli) command(args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.Command(binary, args...)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") && !strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "IDEM_SERVER="+c.server, "IDEM_TOKEN="+c.token, "IDEM_JOURNAL="+c.journal)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// run runs idem with args to the end.
func (c *cli) run(t *testing.T, args ...string) ran {
	t.Helper()
	cmd, stdout, stderr := c.command(args...)
	err := cmd.Run()
	return finish(t, args, cmd, err, stdout, stderr)
}

// finish collects a run; with --format json (the default here) stdout
// must be one JSON object or nothing.
func finish(t *testing.T, args []string, cmd *exec.Cmd, err error, stdout, stderr *bytes.Buffer) ran {
	t.Helper()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("idem %v: %v", args, err)
	}
	r := ran{args: args, code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
	if r.stdout != "" && !slices.Contains(args, "table") {
		if err := json.Unmarshal(stdout.Bytes(), &r.body); err != nil {
			t.Fatalf("idem %v: stdout is not one JSON object (%v):\n%s", args, err, r.stdout)
		}
	}
	return r
}

// want fails unless the run exited with code and, when code is not "",
// printed a problem object with that code.
func (r ran) want(t *testing.T, exit int, code string) ran {
	t.Helper()
	got, _ := r.body["code"].(string)
	if r.code != exit || got != code {
		t.Fatalf("idem %v: exit %d %s, want exit %d %s\nstdout: %s\nstderr: %s", r.args, r.code, got, exit, code, r.stdout, r.stderr)
	}
	return r
}

func (r ran) get(path string) any { return reply{body: r.body}.get(path) }

// journaled returns the key the journal holds for task ("" if none).
func (c *cli) journaled(task string) string {
	data, err := os.ReadFile(filepath.Join(c.journal, "journal.jsonl"))
	if err != nil {
		return ""
	}
	key := ""
	for _, line := range strings.Split(string(data), "\n") {
		var e struct{ Task, Key string }
		if json.Unmarshal([]byte(line), &e) == nil && e.Task == task {
			key = e.Key
		}
	}
	return key
}

// effectsOf returns the ledger effects of one request key.
func effectsOf(t *testing.T, s *server, key string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range ledgerEffects(t, s, "demo-agent") {
		if e["requestKey"] == key {
			out = append(out, e)
		}
	}
	return out
}

// TestCLIExitCodes produces every exit code of SPEC §10.3 with the built
// binary against `idem serve --demo`, each from a real situation.
func TestCLIExitCodes(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, stores["sqlite"](t, dir), dir)
	c := newCLI(t, s.url)

	t.Run("catalog bytes", func(t *testing.T) {
		want := s.do(t, "GET", "/v1/operations", "", "").want(t, 200, "").raw
		for _, args := range [][]string{{"operations", "list", "--format", "json"}, {"operations", "list"}} {
			r := c.run(t, args...).want(t, 0, "")
			if r.stdout != string(want) {
				t.Fatalf("idem %v differs from GET /v1/operations", args)
			}
		}
		table := c.run(t, "operations", "list", "--format", "table").want(t, 0, "")
		if !strings.Contains(table.stdout, "order.refund") || strings.HasPrefix(table.stdout, "{") {
			t.Fatalf("table:\n%s", table.stdout)
		}
	})

	t.Run("0 create, --task twice replays with the same key", func(t *testing.T) {
		args := []string{"call", "business.create", "--data", `{"slug":"cli-co","name":"CLI Co"}`, "--task", "create-cli-co"}
		first := c.run(t, args...).want(t, 0, "")
		key := c.journaled("create-cli-co")
		if key == "" || first.get("meta.idempotency.key") != key || first.get("meta.idempotency.replayed") != false {
			t.Fatalf("first run: journal key %q, answer %s", key, first.stdout)
		}
		second := c.run(t, args...).want(t, 0, "")
		if second.get("meta.idempotency.key") != key || second.get("meta.idempotency.replayed") != true ||
			second.get("meta.executionId") != first.get("meta.executionId") {
			t.Fatalf("second run is not a replay of the first: %s", second.stdout)
		}
		if !strings.Contains(second.stderr, "Current state: idem call business.show --param slug=cli-co") {
			t.Fatalf("stderr of a replay: %s", second.stderr)
		}
		c.run(t, "call", "business.show", "--param", "slug=cli-co").want(t, 0, "")
	})

	t.Run("1 BUSINESS_EXISTS and IDEMPOTENCY_KEY_REUSED", func(t *testing.T) {
		c.run(t, "call", "business.create", "--data", `{"slug":"cli-co","name":"CLI Co"}`, "--idempotency-key", "cli-dup").want(t, 1, "BUSINESS_EXISTS")
		c.run(t, "call", "business.create", "--data", `{"slug":"cli-one","name":"One"}`, "--idempotency-key", "cli-one").want(t, 0, "")
		r := c.run(t, "call", "business.create", "--data", `{"slug":"cli-one","name":"Other"}`, "--idempotency-key", "cli-one").want(t, 1, "IDEMPOTENCY_KEY_REUSED")
		if !strings.HasPrefix(r.stderr, "Error [IDEMPOTENCY_KEY_REUSED]: ") {
			t.Fatalf("stderr = %s", r.stderr)
		}
		c.run(t, "call", "order.refund", "--param", "id=ord_50", "--param", "amount=0", "--idempotency-key", "cli-zero").want(t, 1, "INVALID_INPUT")
	})

	t.Run("2 refused intents send nothing", func(t *testing.T) {
		c.run(t, "call", "business.create", "--data", `{"slug":"cli-bind","name":"Bind"}`, "--task", "create-cli-bind").want(t, 0, "")
		c.run(t, "call", "backend.bind", "--param", "slug=cli-bind", "--param", "name=api", "--param", "environment=preview",
			"--param", "originUrl=https://preview.example.com", "--dry-run", "--idempotency-key", "cli-dry").want(t, 2, "IDEMPOTENCY_KEY_NOT_SUPPORTED")
		s.do(t, "GET", "/v1/attempts/cli-dry", "demo-agent", "").want(t, 404, "NOT_FOUND")
		// Without the key the preview runs.
		dry := c.run(t, "call", "backend.bind", "--param", "slug=cli-bind", "--param", "name=api", "--param", "environment=preview",
			"--param", "originUrl=https://preview.example.com", "--dry-run").want(t, 0, "")
		if dry.get("meta.dryRun") != true {
			t.Fatalf("dry run = %s", dry.stdout)
		}

		key := c.journaled("create-cli-co")
		r := c.run(t, "call", "business.create", "--data", `{"slug":"cli-other","name":"Other"}`, "--task", "create-cli-co").want(t, 2, "IDEMPOTENCY_KEY_REUSED")
		if r.get("details.local") != true || r.get("details.idempotencyKey") != key || !strings.Contains(r.stderr, "Nothing was sent") {
			t.Fatalf("refused task: %s %s", r.stdout, r.stderr)
		}
		s.do(t, "GET", "/v1/businesses/cli-other", "demo-agent", "").want(t, 404, "NOT_FOUND")
		if c.journaled("create-cli-co") != key {
			t.Fatal("the refused run changed the journal")
		}
	})

	t.Run("4 a first call that failed after its effect, then indeterminate", func(t *testing.T) {
		args := []string{"call", "order.refund", "--param", "id=ord_51", "--data", `{"amount":100,"simulate":{"failAfterEffect":true}}`, "--task", "refund-51"}
		first := c.run(t, args...).want(t, 4, "EXECUTION_FAILED")
		if !strings.Contains(first.stderr, "Reconcile first: idem call order.show --param id=ord_51") {
			t.Fatalf("stderr = %s", first.stderr)
		}
		again := c.run(t, args...).want(t, 4, "IDEMPOTENCY_RESULT_INDETERMINATE")
		if again.get("details.reconcile") != "order.show" || !strings.Contains(again.stderr, "Reconcile first: idem call order.show --param id=ord_51") {
			t.Fatalf("indeterminate: %s %s", again.stdout, again.stderr)
		}
		if n := len(effectsOf(t, s, c.journaled("refund-51"))); n != 1 {
			t.Fatalf("%d ledger effects, want 1", n)
		}
		c.run(t, "call", "order.show", "--param", "id=ord_51").want(t, 0, "")
	})

	t.Run("5 approval required, then approved and executed once", func(t *testing.T) {
		args := []string{"call", "order.refund", "--param", "id=ord_52", "--param", "amount=6000", "--task", "refund-52"}
		req := c.run(t, args...).want(t, 5, "APPROVAL_REQUIRED")
		id, _ := req.get("details.approvalId").(string)
		if id == "" || !strings.Contains(req.stderr, "idem approvals approve "+id) {
			t.Fatalf("approval required: %s %s", req.stdout, req.stderr)
		}
		approver := *c
		approver.token = "demo-approver"
		list := approver.run(t, "approvals", "list", "--status", "pending").want(t, 0, "")
		if !strings.Contains(list.stdout, id) {
			t.Fatalf("pending approvals: %s", list.stdout)
		}
		c.run(t, "approvals", "approve", id).want(t, 1, "FORBIDDEN")
		approver.run(t, "approvals", "approve", id, "--reason", "customer called").want(t, 0, "")
		done := c.run(t, args...).want(t, 0, "")
		c.run(t, args...).want(t, 0, "")
		shown := c.run(t, "approvals", "show", id).want(t, 0, "")
		if shown.get("data.status") != "consumed" || shown.get("data.executionId") != done.get("meta.executionId") {
			t.Fatalf("approval after the refund: %s", shown.stdout)
		}
		x := c.run(t, "executions", "show", done.get("meta.executionId").(string)).want(t, 0, "")
		if x.get("data.operation") != "order.refund" {
			t.Fatalf("execution: %s", x.stdout)
		}
		if n := len(effectsOf(t, s, c.journaled("refund-52"))); n != 1 {
			t.Fatalf("%d ledger effects, want 1", n)
		}
	})

	t.Run("attempts show with a key holding a slash", func(t *testing.T) {
		c.run(t, "call", "business.create", "--data", `{"slug":"cli-slash","name":"Slash"}`, "--idempotency-key", "tenant/cli-slash").want(t, 0, "")
		a := c.run(t, "attempts", "show", "tenant/cli-slash").want(t, 0, "")
		if a.get("data.key") != "tenant/cli-slash" || a.get("data.state") != "completed" {
			t.Fatalf("attempt: %s", a.stdout)
		}
		c.run(t, "attempts", "show", "cli-never-sent").want(t, 1, "NOT_FOUND")
	})

	t.Run("3 the server is gone", func(t *testing.T) {
		if err := s.stop(t); err != nil {
			t.Fatalf("stop: %v", err)
		}
		r := c.run(t, "call", "order.refund", "--param", "id=ord_53", "--param", "amount=100", "--task", "refund-53", "--retries", "1").want(t, 3, "NETWORK_ERROR")
		if r.get("status") != float64(0) || r.get("retryable") != true || !strings.HasPrefix(r.stderr, "Error [NETWORK_ERROR]: ") {
			t.Fatalf("network error: %s %s", r.stdout, r.stderr)
		}
	})
}

// TestCLIStoreUnavailable: a refund sent during a PostgreSQL outage is
// answered 503 STORE_UNAVAILABLE (exit 3) and consumes nothing; the same
// task re-run after the outage executes once.
func TestCLIStoreUnavailable(t *testing.T) {
	cluster := pgtest.StartCluster(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE cli_outage"); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	url := strings.Replace(cluster.URL(), "/postgres?", "/cli_outage?", 1)
	dir := t.TempDir()
	s := serve(t, url, dir)
	c := newCLI(t, s.url)
	c.run(t, "operations", "list").want(t, 0, "")

	cluster.Stop()
	args := []string{"call", "order.refund", "--param", "id=ord_54", "--param", "amount=100", "--task", "refund-54", "--retries", "1", "--retry-timeout", "5s"}
	r := c.run(t, args...).want(t, 3, "STORE_UNAVAILABLE")
	key := c.journaled("refund-54")
	if key == "" || r.get("meta.idempotency.key") != nil && r.get("meta.idempotency.key") != key {
		t.Fatalf("journal key %q, answer %s", key, r.stdout)
	}

	cluster.Start()
	for deadline := time.Now().Add(30 * time.Second); s.do(t, "GET", "/readyz", "", "").status != 200; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server did not recover within 30 s of the database")
		}
	}
	done := c.run(t, args...).want(t, 0, "")
	if done.get("meta.idempotency.key") != key || done.get("meta.idempotency.replayed") != false {
		t.Fatalf("after the outage: %s", done.stdout)
	}
	if n := len(effectsOf(t, s, key)); n != 1 {
		t.Fatalf("%d ledger effects, want 1", n)
	}
}

// TestCLITaskSurvivesServerCrash kills the server (SIGKILL) while a --task
// refund sleeps in its handler, restarts it on the same store, and re-runs
// the task: the journal re-sends the same key, the answer is the original
// result or IDEMPOTENCY_RESULT_INDETERMINATE, and the gateway ledger never
// shows a second execution for that key.
func TestCLITaskSurvivesServerCrash(t *testing.T) {
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			url := store(t, dir)
			grace := []string{"--lease-grace", "1s"}
			a := serve(t, url, dir, grace...)
			c := newCLI(t, a.url)
			args := []string{"call", "order.refund", "--param", "id=ord_55", "--data", `{"amount":100,"simulate":{"delayMs":3000}}`, "--task", "crash-refund"}

			cmd, stdout, stderr := c.command(append(args, "--retries", "2", "--retry-timeout", "5s")...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The key is journaled before the request leaves; once the
			// server holds it in flight, kill the server.
			var key string
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if key == "" {
					key = c.journaled("crash-refund")
				}
				if key != "" {
					if r, err := a.try("GET", "/v1/attempts/"+key, "demo-agent", ""); err == nil && r.get("data.state") == "in_flight" {
						break
					}
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatalf("the refund never reached the server in flight (journal key %q)", key)
				}
			}
			a.kill(t)
			first := finish(t, args, cmd, cmd.Wait(), stdout, stderr).want(t, 3, "NETWORK_ERROR")
			if first.get("status") != float64(0) || first.get("details.idempotencyKey") != key {
				t.Fatalf("the interrupted run: %s", first.stdout)
			}

			b := serve(t, url, dir, grace...)
			c.server = b.url
			again := c.run(t, args...)
			switch code, _ := again.body["code"].(string); {
			case again.code == 0 && again.get("meta.idempotency.replayed") == true:
			case again.code == 4 && code == "IDEMPOTENCY_RESULT_INDETERMINATE" && again.get("details.reconcile") == "order.show":
				if !strings.Contains(again.stderr, "Reconcile first: idem call order.show --param id=ord_55") {
					t.Fatalf("stderr = %s", again.stderr)
				}
			default:
				t.Fatalf("re-run after the crash: exit %d\n%s\n%s", again.code, again.stdout, again.stderr)
			}
			if again.get("meta.idempotency.key") != key || !strings.Contains(again.stderr, "re-sending its journaled key "+key) {
				t.Fatalf("the re-run did not re-send key %s: %s %s", key, again.stdout, again.stderr)
			}
			effects := effectsOf(t, b, key)
			if len(effects) > 1 {
				t.Fatalf("%d ledger effects for one key: %v", len(effects), effects)
			}
			for _, e := range effects {
				if ids := e["executionIds"].([]any); len(ids) != 1 {
					t.Fatalf("key %s reached the gateway from %d executions: %v", key, len(ids), e)
				}
			}
		})
	}
}

// cutProxy forwards HTTP/1.1 between the CLI and the server, request by
// request; the answer to the first POST is read from the server (so the
// server has committed it) and never forwarded: the client's connection is
// closed instead.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	posts  atomic.Int32
	wg     sync.WaitGroup
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: strings.TrimPrefix(target, "http://")}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(conn) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) serve(client net.Conn) {
	defer client.Close()
	backend, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer backend.Close()
	fromClient, fromServer := bufio.NewReader(client), bufio.NewReader(backend)
	for {
		req, err := http.ReadRequest(fromClient)
		if err != nil {
			return
		}
		if err := req.Write(backend); err != nil {
			return
		}
		resp, err := http.ReadResponse(fromServer, req)
		if err != nil {
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return
		}
		if req.Method == "POST" {
			p.posts.Add(1)
			if p.cut.CompareAndSwap(false, true) {
				return // the server answered; the client never hears it
			}
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err := resp.Write(client); err != nil {
			return
		}
	}
}

// TestCLIRetriesAfterCutConnection cuts the connection after the server
// committed a refund and before the CLI read the answer: the CLI retries
// with the same key and reports the original result as a replay; the
// ledger shows one effect.
func TestCLIRetriesAfterCutConnection(t *testing.T) {
	dir := t.TempDir()
	s := serve(t, stores["sqlite"](t, dir), dir)
	proxy := startCutProxy(t, s.url)
	c := newCLI(t, proxy.url())

	r := c.run(t, "call", "order.refund", "--param", "id=ord_56", "--param", "amount=100", "--task", "cut-refund").want(t, 0, "")
	key := c.journaled("cut-refund")
	if r.get("meta.idempotency.key") != key || r.get("meta.idempotency.replayed") != true {
		t.Fatalf("after the cut: %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "Replayed") || !strings.Contains(r.stderr, "idem call order.show --param id=ord_56") {
		t.Fatalf("stderr = %s", r.stderr)
	}
	if !proxy.cut.Load() || proxy.posts.Load() != 2 {
		t.Fatalf("proxy: cut %v, %d POSTs; want the first cut and one retry", proxy.cut.Load(), proxy.posts.Load())
	}
	effects := effectsOf(t, s, key)
	if len(effects) != 1 || effects[0]["applied"] != true || effects[0]["calls"] != float64(1) || len(effects[0]["executionIds"].([]any)) != 1 {
		t.Fatalf("ledger effects for %s: %v", key, effects)
	}
	order := s.do(t, "GET", "/v1/orders/ord_56", "demo-agent", "").want(t, 200, "")
	if order.get("data.refunded") != float64(100) {
		t.Fatalf("order after one refund: %s", order.raw)
	}
}

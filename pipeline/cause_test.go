package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/secretbox"
)

// A handler's failure cause: the whole of it in the execution's log line,
// a sanitized one in the final audit event (docs/operations.md).

type failIn struct {
	How string `json:"how"`
}

// dirty is a message with a NUL, a newline, a tab, a bidirectional
// override and 10 KB of text.
var dirty = "card 4242\x00 declined\nline two\t\u202e" + strings.Repeat("x", 10<<10)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the JSON log lines with msg "execution".
func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if m["msg"] == "execution" {
			out = append(out, m)
		}
	}
	return out
}

func failingRunner(t *testing.T, enforcement idem.Enforcement) (*pipeline.Runner, *lockedBuffer) {
	t.Helper()
	retry := idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "job.show", Rationale: "r", Enforcement: enforcement}
	// The secret operation is transactional too: its handler runs inside
	// the store's transaction (pipeline_transact.go).
	retry.Transactional = enforcement == idem.EnforceTransactionalSecretReplay
	run := idem.Define(idem.Metadata{Name: "job.run", Method: "POST", Path: "/v1/jobs", Summary: "Run a job", SideEffect: idem.SideEffectWrite, Retry: retry,
		Errors: []idem.DeclaredError{idem.Declare(codeAlreadyDone, "already")}},
		func(ctx context.Context, call *idem.Call, in failIn) (map[string]string, error) {
			switch in.How {
			case "go":
				return nil, errors.New(dirty)
			case "idem":
				return nil, idem.Errorf(codeAlreadyDone, "%s", dirty)
			case "wrapped":
				return nil, idem.Retryable(idem.Errorf(codeAlreadyDone, "refunded on 2026-11-30"))
			case "panic":
				panic("kaboom " + dirty)
			}
			return map[string]string{"secret": "s3cr3t"}, nil
		})
	show := idem.Define(idem.Metadata{Name: "job.show", Method: "GET", Path: "/v1/jobs", Summary: "Show jobs", SideEffect: idem.SideEffectRead},
		func(ctx context.Context, call *idem.Call, in struct{}) ([]string, error) { return []string{}, nil })
	reg, err := idem.NewRegistry(run, show)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	cfg := pipeline.Config{Store: newSQLiteStore(t, nil), Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	if enforcement == idem.EnforceTransactionalSecretReplay {
		box, err := secretbox.New(bytes.Repeat([]byte{7}, 32))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Sealer = box
	}
	r, err := pipeline.New(reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, logs
}

// finalCause runs job.run with how under key and returns the log line and
// the final audit event's data.
func finalCause(t *testing.T, r *pipeline.Runner, logs *lockedBuffer, how, key string) (map[string]any, map[string]string) {
	t.Helper()
	body, _ := json.Marshal(failIn{How: how})
	resp := r.Call(t.Context(), idem.Invocation{Operation: "job.run", Principal: agent, Key: key, Intent: idem.Intent{Body: body}})
	if resp.Problem == nil {
		t.Fatalf("%s: no problem: %s", how, resp.Body())
	}
	x, err := r.GetExecution(t.Context(), agent, resp.Meta.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	final := x.Events[len(x.Events)-1]
	if final.Type != idem.EventFailed {
		t.Fatalf("final event %+v", final)
	}
	lines := logs.lines(t)
	line := lines[len(lines)-1]
	if line["executionId"] != resp.Meta.ExecutionID {
		t.Fatalf("the last log line is %v, not execution %s's", line, resp.Meta.ExecutionID)
	}
	return line, final.Data
}

func TestHandlerFailureCause(t *testing.T) {
	r, logs := failingRunner(t, "")

	t.Run("a Go error: its message in the log, a fixed sentence in the audit", func(t *testing.T) {
		line, data := finalCause(t, r, logs, "go", "k-go")
		if line["cause"] != dirty || line["panic"] != nil || line["stack"] != nil {
			t.Fatalf("log line cause %.60q, panic %v", line["cause"], line["panic"])
		}
		if c := data["cause"]; c == "" || strings.Contains(c, "4242") || strings.Contains(c, "xxx") || !strings.Contains(c, "log line (field cause)") {
			t.Fatalf("audit cause %q holds the error's text or says nothing", c)
		}
	})
	t.Run("an idem error: code and message, sanitized and bounded", func(t *testing.T) {
		line, data := finalCause(t, r, logs, "idem", "k-idem")
		if line["cause"] != "ALREADY_DONE: "+dirty {
			t.Fatalf("log line cause %.60q", line["cause"])
		}
		c := data["cause"]
		if !strings.HasPrefix(c, "ALREADY_DONE: card 4242  declined line two") || !strings.HasSuffix(c, "x…") {
			t.Fatalf("audit cause %.80q", c)
		}
		if n := utf8.RuneCountInString(c); n != 201 {
			t.Fatalf("audit cause has %d characters, want 200 and the ellipsis", n)
		}
		for _, ch := range c {
			if unicode.IsControl(ch) || unicode.Is(unicode.Cf, ch) {
				t.Fatalf("audit cause holds %U: %q", ch, c)
			}
		}
	})
	t.Run("an idem error behind a wrapper is one", func(t *testing.T) {
		_, data := finalCause(t, r, logs, "wrapped", "k-wrapped")
		if data["cause"] != "ALREADY_DONE: refunded on 2026-11-30" {
			t.Fatalf("audit cause %q", data["cause"])
		}
	})
	t.Run("a panic: value and stack in the log, a fixed sentence in the audit", func(t *testing.T) {
		line, data := finalCause(t, r, logs, "panic", "k-panic")
		if line["panic"] != "kaboom "+dirty || line["cause"] != "handler panicked: kaboom "+dirty {
			t.Fatalf("log line panic %.60q cause %.60q", line["panic"], line["cause"])
		}
		stack, _ := line["stack"].(string)
		if !strings.Contains(stack, "goroutine ") || !strings.Contains(stack, "cause_test.go") {
			t.Fatalf("log line stack %q does not show the panicking handler", stack)
		}
		if c := data["cause"]; strings.Contains(c, "kaboom") || !strings.Contains(c, "panicked") {
			t.Fatalf("audit cause %q", c)
		}
	})
	t.Run("a success has no cause", func(t *testing.T) {
		body, _ := json.Marshal(failIn{How: "ok"})
		resp := r.Call(t.Context(), idem.Invocation{Operation: "job.run", Principal: agent, Key: "k-ok", Intent: idem.Intent{Body: body}})
		x, _ := r.GetExecution(t.Context(), agent, resp.Meta.ExecutionID)
		lines := logs.lines(t)
		if line := lines[len(lines)-1]; line["cause"] != nil || x.Events[len(x.Events)-1].Data["cause"] != "" {
			t.Fatalf("success: log %v, events %+v", line, x.Events)
		}
	})
}

// TestHandlerFailureCauseOfSecretOperations: a transactional operation
// whose result is a secret follows the same rule.
func TestHandlerFailureCauseOfSecretOperations(t *testing.T) {
	r, logs := failingRunner(t, idem.EnforceTransactionalSecretReplay)
	_, data := finalCause(t, r, logs, "go", "k-go")
	if !strings.Contains(data["cause"], "log line (field cause)") {
		t.Fatalf("audit cause %q", data["cause"])
	}
	_, data = finalCause(t, r, logs, "wrapped", "k-wrapped")
	if data["cause"] != "ALREADY_DONE: refunded on 2026-11-30" {
		t.Fatalf("audit cause %q", data["cause"])
	}
	line, data := finalCause(t, r, logs, "panic", "k-panic")
	if line["stack"] == nil || !strings.Contains(data["cause"], "panicked") {
		t.Fatalf("panic: log %v, audit cause %q", line["panic"], data["cause"])
	}
}

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/demo"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/pipeline"
)

// dirty is an error message with a NUL, a newline, a bidirectional
// override and 10 KB of text.
var dirty = "card 4242\x00 declined\n\u202e" + strings.Repeat("y", 10<<10)

// TestFailureCauseInTheExecution: GET /v1/executions/{id} shows the final
// event's sanitized cause (data.cause) on both stores: an idem error's
// code and message made printable and cut at 200 characters; for a Go
// error or a panic, a sentence pointing to the log line, with none of its
// text.
func TestFailureCauseInTheExecution(t *testing.T) {
	for name, store := range map[string]func(*testing.T, idem.Clock) idem.Store{"sqlite": sqliteStore, "postgres": postgresStore} {
		t.Run(name, func(t *testing.T) { testFailureCause(t, store) })
	}
}

func testFailureCause(t *testing.T, newStore func(*testing.T, idem.Clock) idem.Store) {
	type jobIn struct {
		How string `json:"how"`
	}
	run := idem.Define(idem.Metadata{Name: "job.run", Method: "POST", Path: "/v1/jobs", Summary: "Run a job", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetryNoAutomaticRetry, Rationale: "r"}},
		func(ctx context.Context, call *idem.Call, in jobIn) (map[string]string, error) {
			switch in.How {
			case "idem":
				return nil, idem.Errorf(demo.CodeAlreadyRefunded, "%s", dirty)
			case "panic":
				panic(dirty)
			}
			return nil, errors.New(dirty)
		})
	reg, err := idem.NewRegistry(run)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	runner, err := pipeline.New(reg, pipeline.Config{Store: newStore(t, nil), Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	auth := httpapi.NewTokens(map[string]idem.Principal{tokenAgent: {Org: "acme", ID: "agent-1", Kind: idem.KindAgent}})
	ts := httptest.NewServer(httpapi.NewHandler(httpapi.Config{Runner: runner, Auth: auth, Logger: slog.New(slog.DiscardHandler), Version: "test"}))
	t.Cleanup(ts.Close)
	s := &server{url: ts.URL}

	cause := func(how string) string {
		t.Helper()
		a := s.send(t, "POST", "/v1/jobs", tokenAgent, hdr{"Content-Type": {"application/json"}}, `{"how":"`+how+`"}`)
		if a.status < 400 {
			t.Fatalf("%s: %d %s", how, a.status, a.raw)
		}
		x := s.send(t, "GET", "/v1/executions/"+a.body.Meta.ExecutionID, tokenAgent, nil, "").expect(t, 200, "")
		var exe struct {
			Events []struct {
				Type string            `json:"type"`
				Code string            `json:"code"`
				Data map[string]string `json:"data"`
			} `json:"events"`
		}
		if err := json.Unmarshal(x.body.Data, &exe); err != nil {
			t.Fatal(err)
		}
		final := exe.Events[len(exe.Events)-1]
		if final.Type != idem.EventFailed || final.Code != string(a.body.Code) {
			t.Fatalf("final event %+v", final)
		}
		return final.Data["cause"]
	}

	c := cause("idem")
	if !strings.HasPrefix(c, "ALREADY_REFUNDED: card 4242  declined  yyy") || !strings.HasSuffix(c, "y…") || utf8.RuneCountInString(c) != 201 {
		t.Fatalf("idem error: cause %q (%d characters)", c, utf8.RuneCountInString(c))
	}
	for _, ch := range c {
		if unicode.IsControl(ch) || unicode.Is(unicode.Cf, ch) {
			t.Fatalf("cause holds %U", ch)
		}
	}
	for _, how := range []string{"go", "panic"} {
		if c := cause(how); strings.Contains(c, "4242") || strings.Contains(c, "yyy") || !strings.Contains(c, "log line") {
			t.Fatalf("%s: cause %q", how, c)
		}
	}
	if !strings.Contains(logs.String(), `"cause":"card 4242\u0000 declined\n`) || !strings.Contains(logs.String(), `"stack":"goroutine `) {
		t.Fatalf("the log lines lack the whole cause or the stack")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

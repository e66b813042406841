package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/pipeline"
)

// A typed operation with header inputs, behind a real listener whose
// middleware puts a value in the request's context.

type noteIn struct {
	Tenant   string `json:"tenant" in:"header" header:"X-Tenant"`
	Priority int    `json:"priority,omitempty" in:"header" header:"x-priority"`
	Text     string `json:"text"`
}

type noteOut struct {
	Tenant   string `json:"tenant"`
	Priority int    `json:"priority"`
	Text     string `json:"text"`
	// Context is the value the middleware put in the request's context,
	// as the handler's ctx carries it.
	Context string `json:"context"`
}

type ctxKey struct{}

func noteOperations() []idem.Operation {
	add := idem.Define(idem.Metadata{
		Name: "note.add", Method: "POST", Path: "/v1/notes", Summary: "Add a note", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "note.list", Rationale: "r"},
	}, func(ctx context.Context, call *idem.Call, in noteIn) (noteOut, error) {
		v, _ := ctx.Value(ctxKey{}).(string)
		return noteOut{Tenant: in.Tenant, Priority: in.Priority, Text: in.Text, Context: v}, nil
	})
	list := idem.Define(idem.Metadata{Name: "note.list", Method: "GET", Path: "/v1/notes", Summary: "List notes", SideEffect: idem.SideEffectRead},
		func(ctx context.Context, call *idem.Call, in struct{}) ([]noteOut, error) { return []noteOut{}, nil })
	return []idem.Operation{add, list}
}

func startNoteServer(t *testing.T) *server {
	t.Helper()
	reg, err := idem.NewRegistry(noteOperations()...)
	if err != nil {
		t.Fatal(err)
	}
	runner, err := pipeline.New(reg, pipeline.Config{Store: sqliteStore(t, nil), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	auth := httpapi.NewTokens(map[string]idem.Principal{tokenAgent: {Org: "acme", ID: "agent-1", Kind: idem.KindAgent}})
	h := httpapi.NewHandler(httpapi.Config{Runner: runner, Auth: auth, Logger: slog.New(slog.DiscardHandler), Version: "test"})
	withValue := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, "from-middleware")))
	})
	ts := httptest.NewServer(withValue)
	t.Cleanup(ts.Close)
	return &server{url: ts.URL, handler: withValue}
}

// TestHeaderInputs: a declared header reaches the handler as its field,
// typed like a query parameter; a missing required one, a repeated one or
// one of the wrong type is 400 INVALID_INPUT naming the header; it is part
// of the fingerprint (another value under the same key is 422), while an
// undeclared header is not (the same key replays). The handler's ctx
// carries the request context's values.
func TestHeaderInputs(t *testing.T) {
	s := startNoteServer(t)
	send := func(h hdr, body string) answer {
		t.Helper()
		return s.send(t, "POST", "/v1/notes", tokenAgent, h, body)
	}
	with := func(k string, pairs ...string) hdr {
		h := hdr{"Idempotency-Key": {k}}
		for i := 0; i+1 < len(pairs); i += 2 {
			h[pairs[i]] = append(h[pairs[i]], pairs[i+1])
		}
		return h
	}

	first := send(with("k-1", "X-Tenant", "acme", "X-Priority", "2", "X-Other", "a"), `{"text":"hi"}`).expect(t, 200, "")
	var got noteOut
	if err := json.Unmarshal(first.body.Data, &got); err != nil {
		t.Fatal(err)
	}
	if got != (noteOut{Tenant: "acme", Priority: 2, Text: "hi", Context: "from-middleware"}) {
		t.Fatalf("the handler saw %+v", got)
	}

	t.Run("undeclared headers are not the intent", func(t *testing.T) {
		again := send(with("k-1", "X-Tenant", "acme", "X-Priority", "2", "X-Other", "b"), `{"text":"hi"}`).expect(t, 200, "")
		if again.body.Meta.Idempotency == nil || !again.body.Meta.Idempotency.Replayed || again.body.Meta.ExecutionID != first.body.Meta.ExecutionID {
			t.Fatalf("want a replay of %s: %s", first.body.Meta.ExecutionID, again.raw)
		}
	})
	t.Run("another header value under the same key is a reuse", func(t *testing.T) {
		reused := send(with("k-1", "X-Tenant", "globex", "X-Priority", "2"), `{"text":"hi"}`).expect(t, 422, idem.CodeIdempotencyKeyReused)
		if !strings.Contains(reused.body.Detail, "(method, path, query, header inputs or body differ)") {
			t.Fatalf("detail %q", reused.body.Detail)
		}
		send(with("k-1", "X-Tenant", "acme"), `{"text":"hi"}`).expect(t, 422, idem.CodeIdempotencyKeyReused)
	})
	rows := []struct {
		name   string
		header hdr
		body   string
		want   string
	}{
		{"missing required header", with("k-2", "X-Priority", "1"), `{"text":"hi"}`, "header X-Tenant is required"},
		{"header given twice", with("k-3", "X-Tenant", "a", "X-Tenant", "b"), `{"text":"hi"}`, "header X-Tenant is given 2 times; give it once"},
		{"header of the wrong type", with("k-4", "X-Tenant", "a", "X-Priority", "high"), `{"text":"hi"}`, `header X-Priority: want an integer, got "high"`},
		{"header argument in the body", with("k-5", "X-Tenant", "a"), `{"text":"hi","tenant":"b"}`, "tenant comes from the header X-Tenant, not the body"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			a := send(row.header, row.body).expect(t, 400, idem.CodeInvalidInput)
			if !strings.Contains(a.body.Detail, row.want) {
				t.Fatalf("detail %q, want it to say %q", a.body.Detail, row.want)
			}
			errs, _ := a.body.Details["errors"].([]any)
			if len(errs) != 1 || errs[0].(map[string]any)["path"] == "" {
				t.Fatalf("details.errors = %v", a.body.Details["errors"])
			}
			// Nothing was stored: the key is free.
			s.send(t, "GET", "/v1/attempts/"+row.header["Idempotency-Key"][0], tokenAgent, nil, "").expect(t, 404, idem.CodeNotFound)
		})
	}
}

// TestHeaderInputsPassTheLintRules: the document with header parameters
// passes the same rules as the demo's.
func TestHeaderInputsPassTheLintRules(t *testing.T) {
	reg, err := idem.NewRegistry(noteOperations()...)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(httpapi.OpenAPI(reg.Descriptors(), httpapi.OpenAPIInfo{Version: "test"}), &doc); err != nil {
		t.Fatal(err)
	}
	lintOpenAPI(t, doc)
}

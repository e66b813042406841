package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/secretbox"
	"github.com/idem-run/idem/sqlitestore"
)

// updateGolden rewrites the golden files: go test ./httpapi -run Golden -update
var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/")

// The catalog test registry: one operation of each shape the catalog and
// the OpenAPI document must render.

type catGadget struct {
	ID    string `json:"id"`
	Shop  string `json:"shop"`
	Name  string `json:"name"`
	Color string `json:"color,omitempty"`
}

type catGadgetCreateIn struct {
	Shop  string `json:"shop" in:"path" jsonschema:"pattern=^[a-z0-9-]+$"`
	Name  string `json:"name" jsonschema:"minLength=1,description=Unique in the shop"`
	Color string `json:"color,omitempty" jsonschema:"enum=red,enum=blue"`
}

type catGadgetListIn struct {
	Shop  string `json:"shop" in:"path"`
	Color string `json:"color,omitempty" in:"query" jsonschema:"enum=red,enum=blue"`
}

type catGadgetList struct {
	Gadgets []catGadget `json:"gadgets"`
}

type catBindIn struct {
	Shop        string `json:"shop" in:"path"`
	Name        string `json:"name" in:"path"`
	Environment string `json:"environment" in:"query" jsonschema:"enum=preview,enum=production"`
	OriginURL   string `json:"originUrl" jsonschema:"format=uri"`
}

type catBinding struct {
	Environment string `json:"environment"`
	OriginURL   string `json:"originUrl"`
}

type catMintIn struct {
	Name   string   `json:"name"`
	Scopes []string `json:"scopes" jsonschema:"enum=read,enum=write,enum=admin"`
}

type catToken struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Secret string `json:"secret,omitempty"`
}

type catTokenList struct {
	Tokens []catToken `json:"tokens"`
}

type catContextToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

type catNoteSearchIn struct {
	Q string `json:"q" in:"query"`
}

type catNotes struct {
	Notes []string `json:"notes"`
}

// catalogTestSecretWindow is the runner's configured secret window; the
// catalog must publish it, not the default.
const catalogTestSecretWindow = 10 * time.Minute

func catalogTestOperations() []idem.Operation {
	return []idem.Operation{
		idem.Define(idem.Metadata{
			Name: "gadget.create", Method: "POST", Path: "/v1/shops/{shop}/gadgets",
			Summary: "Create a gadget in a shop.", SideEffect: idem.SideEffectWrite,
			Retry: idem.RetryContract{
				Kind: idem.RetrySameKeyReplay, Reconcile: "gadget.list",
				Rationale: "Creating twice would make two gadgets; the key makes a retry replay the first answer.",
			},
			Errors:        []idem.DeclaredError{{Code: "GADGET_EXISTS", Status: 409, Message: "a gadget with this name exists in the shop"}},
			SuccessStatus: 201,
		}, func(ctx context.Context, call *idem.Call, in catGadgetCreateIn) (catGadget, error) {
			return catGadget{ID: "gad_1", Shop: in.Shop, Name: in.Name, Color: in.Color}, nil
		}),
		idem.Define(idem.Metadata{
			Name: "gadget.list", Method: "GET", Path: "/v1/shops/{shop}/gadgets",
			Summary: "List a shop's gadgets.", SideEffect: idem.SideEffectRead,
			Retry: idem.RetryContract{Rationale: "A read of current state; repeat it freely."},
		}, func(ctx context.Context, call *idem.Call, in catGadgetListIn) (catGadgetList, error) {
			return catGadgetList{Gadgets: []catGadget{}}, nil
		}),
		idem.Define(idem.Metadata{
			Name: "gadget.bind", Method: "PUT", Path: "/v1/shops/{shop}/gadgets/{name}/backend",
			Summary: "Bind a gadget's backend in one environment.", SideEffect: idem.SideEffectWrite,
			Retry: idem.RetryContract{
				Kind: idem.RetryConvergent, Reconcile: "gadget.list", Preview: true,
				Rationale: "A desired-state write identified by gadget and environment; reconcile before repeating.",
			},
		}, func(ctx context.Context, call *idem.Call, in catBindIn) (catBinding, error) {
			return catBinding{Environment: in.Environment, OriginURL: in.OriginURL}, nil
		}).WithPreview(func(ctx context.Context, call *idem.Call, in catBindIn) (any, error) {
			return map[string]string{"originUrl": in.OriginURL}, nil
		}),
		idem.Define(idem.Metadata{
			Name: "token.mint", Method: "POST", Path: "/v1/tokens",
			Summary: "Mint an API token; the secret is shown once.", SideEffect: idem.SideEffectWrite,
			Retry: idem.RetryContract{
				Kind: idem.RetrySameKeyReplay, Enforcement: idem.EnforceTransactionalSecretReplay, Reconcile: "token.list",
				Rationale: "A same-key retry recovers the exact secret within the window instead of minting another.",
			},
			SuccessStatus: 201,
		}, func(ctx context.Context, call *idem.Call, in catMintIn) (catToken, error) {
			return catToken{ID: "tok_1", Name: in.Name, Secret: "s3cret"}, nil
		}),
		idem.Define(idem.Metadata{
			Name: "token.list", Method: "GET", Path: "/v1/tokens",
			Summary: "List tokens (never their secrets).", SideEffect: idem.SideEffectRead,
			Retry: idem.RetryContract{Rationale: "A read of current state."},
		}, func(ctx context.Context, call *idem.Call, in struct{}) (catTokenList, error) {
			return catTokenList{Tokens: []catToken{}}, nil
		}),
		idem.Define(idem.Metadata{
			Name: "session.context_token", Method: "POST", Path: "/v1/session/context-token",
			Summary: "Mint a short-lived context token.", SideEffect: idem.SideEffectWrite,
			Retry: idem.RetryContract{
				Kind:      idem.RetryNoAutomaticRetry,
				Rationale: "A point-in-time credential: after an ambiguous answer request a new one.",
			},
		}, func(ctx context.Context, call *idem.Call, in struct{}) (catContextToken, error) {
			return catContextToken{Token: "ctx_1", ExpiresAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, nil
		}),
		idem.Define(idem.Metadata{
			Name: "note.search", Method: "GET", Path: "/v1/notes",
			Summary: "Search notes (MCP only).", SideEffect: idem.SideEffectRead,
			Retry:    idem.RetryContract{Rationale: "A read of current state."},
			Surfaces: []idem.Surface{idem.SurfaceMCP},
		}, func(ctx context.Context, call *idem.Call, in catNoteSearchIn) (catNotes, error) {
			return catNotes{Notes: []string{}}, nil
		}),
	}
}

// catalogTestRunner is a runner over catalogTestOperations on a SQLite
// store in t.TempDir(), with a 10-minute secret window.
func catalogTestRunner(t *testing.T) *pipeline.Runner {
	t.Helper()
	return catalogTestRunnerFor(t, catalogTestOperations()...)
}

func catalogTestRunnerFor(t *testing.T, ops ...idem.Operation) *pipeline.Runner {
	t.Helper()
	reg, err := idem.NewRegistry(ops...)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	box, err := secretbox.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{
		Store: store, Sealer: box, SecretWindow: catalogTestSecretWindow,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// catalogGolden compares got with testdata/name, or rewrites it with -update.
func catalogGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (create it with go test ./httpapi -run Golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the rendered document (review, then go test ./httpapi -run Golden -update):\n got: %s\nwant: %s", path, got, want)
	}
}

// TestCatalogGolden pins the catalog's bytes. The golden file was written
// by another process, so a match also shows determinism across processes.
func TestCatalogGolden(t *testing.T) {
	descs := catalogTestRunner(t).Descriptors()
	got := Catalog(descs)
	catalogGolden(t, "catalog.golden.json", got)

	if again := Catalog(catalogTestRunner(t).Descriptors()); !bytes.Equal(again, got) {
		t.Errorf("a second render over a new runner differs:\n%s\n%s", got, again)
	}
	reversed := slices.Clone(descs)
	slices.Reverse(reversed)
	if other := Catalog(reversed); !bytes.Equal(other, got) {
		t.Errorf("the catalog depends on the descriptors' order:\n%s\n%s", got, other)
	}
	if !bytes.HasSuffix(got, []byte("}\n")) || bytes.Count(got, []byte("\n")) != 1 {
		t.Errorf("want compact JSON with one trailing newline")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, got); err != nil || compact.Len() != len(got)-1 {
		t.Errorf("the catalog is not compact JSON (err %v)", err)
	}
}

// catalogKeys returns the keys of a JSON object in document order.
func catalogKeys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	o, ok := parseObject(raw)
	if !ok {
		t.Fatalf("not a JSON object: %s", raw)
	}
	keys := make([]string, 0, len(o))
	for _, m := range o {
		keys = append(keys, m.key)
	}
	return keys
}

func TestCatalogShape(t *testing.T) {
	raw := Catalog(catalogTestRunner(t).Descriptors())
	if got, want := catalogKeys(t, raw), []string{"operations", "directCliOperations"}; !slices.Equal(got, want) {
		t.Fatalf("top-level keys = %v, want %v", got, want)
	}
	var cat struct {
		Operations          []json.RawMessage `json:"operations"`
		DirectCLIOperations []json.RawMessage `json:"directCliOperations"`
	}
	if err := json.Unmarshal(raw, &cat); err != nil {
		t.Fatal(err)
	}
	want := []string{"name", "method", "path", "summary", "sideEffect", "idempotent", "timeoutMs", "runtimeRetry", "retry", "approval", "surfaces", "errors", "inputSchema", "outputSchema"}
	if got := catalogKeys(t, cat.Operations[0]); !slices.Equal(got, want) {
		t.Errorf("first operation's keys = %v\nwant SPEC §4 order %v", got, want)
	}

	type entry struct {
		Name         string                     `json:"name"`
		TimeoutMs    int64                      `json:"timeoutMs"`
		RuntimeRetry json.RawMessage            `json:"runtimeRetry"`
		Retry        map[string]json.RawMessage `json:"retry"`
		Surfaces     []string                   `json:"surfaces"`
		Errors       json.RawMessage            `json:"errors"`
		InputSchema  json.RawMessage            `json:"inputSchema"`
	}
	var names []string
	byName := map[string]entry{}
	for i, op := range cat.Operations {
		if got := catalogKeys(t, op); !slices.Equal(got, want) {
			t.Errorf("operation %d keys = %v", i, got)
		}
		var e entry
		if err := json.Unmarshal(op, &e); err != nil {
			t.Fatal(err)
		}
		names = append(names, e.Name)
		byName[e.Name] = e
		if !slices.IsSorted(e.Surfaces) {
			t.Errorf("%s: surfaces %v not sorted", e.Name, e.Surfaces)
		}
		if got := catalogKeys(t, e.RuntimeRetry); !slices.Equal(got, []string{"maxAttempts", "backoffMs"}) {
			t.Errorf("%s: runtimeRetry keys = %v", e.Name, got)
		}
		if _, ok := e.Retry["reconcile"]; !ok {
			t.Errorf("%s: retry has no reconcile key (want null or a name)", e.Name)
		}
		_, hasWindow := e.Retry["secretReplayWindowMs"]
		if hasWindow != (e.Name == "token.mint") {
			t.Errorf("%s: secretReplayWindowMs present = %v, want only on the mint", e.Name, hasWindow)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("operations not sorted by name: %v", names)
	}
	if want := []string{"gadget.bind", "gadget.create", "gadget.list", "note.search", "session.context_token", "token.list", "token.mint"}; !slices.Equal(names, want) {
		t.Errorf("operations = %v, want %v (the MCP-only note.search included)", names, want)
	}

	list := byName["gadget.list"]
	if got := string(list.Retry["reconcile"]); got != "null" {
		t.Errorf("fresh_read reconcile = %s, want null", got)
	}
	if got := string(byName["session.context_token"].Retry["reconcile"]); got != "null" {
		t.Errorf("no_automatic_retry reconcile = %s, want null", got)
	}
	if got := string(byName["gadget.create"].Retry["reconcile"]); got != `"gadget.list"` {
		t.Errorf("same_key_replay reconcile = %s", got)
	}
	if got := string(byName["token.mint"].Retry["secretReplayWindowMs"]); got != "600000" {
		t.Errorf("secretReplayWindowMs = %s, want the runner's 600000", got)
	}
	if got := string(list.Errors); got != "[]" {
		t.Errorf("errors of an operation without declared errors = %s, want []", got)
	}
	if got := string(byName["gadget.create"].Errors); got != `[{"code":"GADGET_EXISTS","status":409,"message":"a gadget with this name exists in the shop"}]` {
		t.Errorf("declared errors = %s", got)
	}
	if list.TimeoutMs != 30000 || string(list.RuntimeRetry) != `{"maxAttempts":0,"backoffMs":250}` {
		t.Errorf("defaults: timeoutMs %d, runtimeRetry %s", list.TimeoutMs, list.RuntimeRetry)
	}
	if got := byName["note.search"].Surfaces; !slices.Equal(got, []string{"mcp"}) {
		t.Errorf("note.search surfaces = %v", got)
	}
	d, _ := catalogTestRunner(t).Describe("gadget.create")
	if got := string(byName["gadget.create"].InputSchema); got != string(d.InputSchema) {
		t.Errorf("inputSchema is not the registry's schema byte for byte:\n%s\n%s", got, d.InputSchema)
	}

	if len(cat.DirectCLIOperations) != 1 {
		t.Fatalf("directCliOperations = %d entries", len(cat.DirectCLIOperations))
	}
	direct := cat.DirectCLIOperations[0]
	if got := catalogKeys(t, direct); !slices.Equal(got, []string{"name", "command", "summary", "retry"}) {
		t.Errorf("directCliOperations keys = %v", got)
	}
	var listen idem.DirectCLIOperation
	if err := json.Unmarshal(direct, &listen); err != nil {
		t.Fatal(err)
	}
	r := listen.Retry
	if listen.Name != "webhook.listen" || listen.Command != "idem webhook listen" ||
		r.Kind != idem.RetryNoAutomaticRetry || r.KeyRequired || r.Enforcement != idem.EnforceNone ||
		r.ResponseSemantics != idem.SemanticsPointInTime || r.Reconcile != "" || r.Preview ||
		!bytes.Contains(direct, []byte(`"reconcile":null`)) || !bytes.Contains(direct, []byte("process-owning, multi-step session")) {
		t.Errorf("webhook.listen = %s", direct)
	}
}

// TestCatalogEmpty: no operations is an empty list, never null.
func TestCatalogEmpty(t *testing.T) {
	got := string(Catalog(nil))
	if !bytes.HasPrefix([]byte(got), []byte(`{"operations":[],"directCliOperations":[{"name":"webhook.listen"`)) {
		t.Errorf("Catalog(nil) = %s", got)
	}
}

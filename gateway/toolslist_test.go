package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gateway"
)

func page(w http.ResponseWriter, req rpc, tools []any, next string) {
	res := map[string]any{"tools": tools}
	if next != "" {
		res["nextCursor"] = next
	}
	writeJSON(w, http.StatusOK, result(req.ID, res))
}

func tool(name string, schema any) map[string]any {
	return map[string]any{"name": name, "inputSchema": schema}
}

var object = map[string]any{"type": "object"}

// nested is an object schema whose property "a" nests levels deep.
func nested(levels int) json.RawMessage {
	var b bytes.Buffer
	for range levels {
		b.WriteString(`{"type":"object","properties":{"a":`)
	}
	b.WriteString(`{"type":"string"}`)
	for range levels {
		b.WriteString(`}}`)
	}
	return b.Bytes()
}

// TestUpstreamHostileToolListIsBounded (issue 33 item 2): an upstream's
// tools/list that pages forever, pages in a circle, lists 20,000 tools or
// answers over the bytes' bound is refused with a message naming the
// bound, at start and on a reload (the gateway keeps what it serves).
func TestUpstreamHostileToolListIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		list func(http.ResponseWriter, rpc)
		want string
	}{
		{"pages forever", func(w http.ResponseWriter, req rpc) {
			var p struct{ Cursor string }
			json.Unmarshal(req.Params, &p)
			page(w, req, []any{tool("t"+p.Cursor, object)}, p.Cursor+"x")
		}, "bound of 1000 pages"},
		{"pages in a circle", func(w http.ResponseWriter, req rpc) {
			page(w, req, []any{tool("t", object)}, "again")
		}, `gave the cursor "again" twice`},
		{"20,000 tools", func(w http.ResponseWriter, req rpc) {
			tools := make([]any, 20000)
			for i := range tools {
				tools[i] = tool(fmt.Sprintf("t%d", i), object)
			}
			page(w, req, tools, "")
		}, "bound of 5000 tools"},
		{"40 MiB", func(w http.ResponseWriter, req rpc) {
			page(w, req, []any{map[string]any{"name": "t", "inputSchema": object, "description": strings.Repeat("d", 40<<20)}}, "")
		}, "bound of 33554432 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newRawUpstream(t)
			up, err := gateway.Dial(t.Context(), gateway.UpstreamConfig{URL: u.url})
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			if _, err := up.Tools(t.Context()); err != nil {
				t.Fatalf("an honest list: %v", err)
			}
			u.mu.Lock()
			u.list = tc.list
			u.mu.Unlock()
			if _, err := up.Tools(t.Context()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("tools/list: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestGatewayServesTheRestOfAnOddToolList (issue 33 item 2 and the lows):
// a tool nested 500 levels deep (the SDK refuses a page deeper than 1000
// whole), tools named "." and "..", and a 5,000-value enum: the deep
// and the unroutable tools are left out with a warning, an enum of more
// than 1000 values is left
// out of what idem checks and serves with a warning, and the rest is
// served.
func TestGatewayServesTheRestOfAnOddToolList(t *testing.T) {
	u := newRawUpstream(t)
	enum := make([]string, 5000) // the bound is 1000; RSS under a 1,000,000-value enum: docs/RELIABILITY.md
	for i := range enum {
		enum[i] = fmt.Sprint(i)
	}
	u.list = func(w http.ResponseWriter, req rpc) {
		page(w, req, []any{
			tool("add", object),
			map[string]any{"name": "total", "inputSchema": object, "annotations": map[string]any{"readOnlyHint": true}},
			tool("deep", nested(500)),
			tool(".", object),
			tool("..", object),
			tool("pick", map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string", "enum": enum}}}),
		}, "")
	}
	up, err := gateway.Dial(t.Context(), gateway.UpstreamConfig{URL: u.url})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	tools, warnings, err := up.ListTools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 5 || len(warnings) != 1 || !strings.Contains(warnings[0], `"deep"`) {
		t.Fatalf("%d tools, warnings %q", len(tools), warnings)
	}
	built, err := gateway.Build(tools, addOverlay, up, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	for _, op := range built.Operations {
		served = append(served, op.Metadata().Name)
	}
	if strings.Join(served, ",") != "add,pick,total" {
		t.Fatalf("served %v, warnings %q", served, built.Warnings)
	}
	all := strings.Join(built.Warnings, "\n")
	for _, want := range []string{`tool "." is not served`, `tool ".." is not served`, `tool "pick": the enum at #/properties/id/enum has 5000 values`} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings %q, want %q", built.Warnings, want)
		}
	}
	reg, err := idem.NewRegistry(built.Operations...)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := reg.Describe("pick"); strings.Contains(string(d.InputSchema), "enum") {
		t.Fatalf("pick's served schema keeps the enum: %.200s", d.InputSchema)
	}
}

// TestGatewaysInFrontOfTwoUpstreamsShareNoKeys (issue 33, a low): two
// gateways on one store, in front of two upstreams with a tool of one
// name: the same key and arguments through the second is not the first's
// record (SPEC §6.2: the upstream is in the fingerprint).
func TestGatewaysInFrontOfTwoUpstreamsShareNoKeys(t *testing.T) {
	db := filepath.Join(t.TempDir(), "idem.db")
	a, b := newRawUpstream(t), newRawUpstream(t)
	gwA, _ := gatewayOn(t, db, gateway.UpstreamConfig{URL: a.url}, addOverlay)
	gwB, _ := gatewayOn(t, db, gateway.UpstreamConfig{URL: b.url, Name: "b"}, addOverlay)
	if status, body := post(t, gwA, "add", "shared-1", `{"n":1}`); status != http.StatusOK {
		t.Fatalf("through A: %d %s", status, body)
	}
	status, body := post(t, gwB, "add", "shared-1", `{"n":1}`)
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, "IDEMPOTENCY_KEY_REUSED") {
		t.Fatalf("the same key through B: %d %s (B's upstream ran %d calls)", status, body, b.calls.Load())
	}
	if b.calls.Load() != 0 || a.calls.Load() != 1 {
		t.Fatalf("calls: A %d, B %d", a.calls.Load(), b.calls.Load())
	}
}

// TestUpstreamLargeToolListPage: a 4.5 MiB tools/list page, over the
// bound of a call's answer and within a listing's, is read, as JSON and
// as an SSE event.
func TestUpstreamLargeToolListPage(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			u := newRawUpstream(t)
			u.list = func(w http.ResponseWriter, req rpc) {
				tools := make([]any, 2200)
				for i := range tools {
					tools[i] = map[string]any{"name": fmt.Sprintf("t%d", i), "description": strings.Repeat("d", 2<<10), "inputSchema": object}
				}
				if !sse {
					page(w, req, tools, "")
					return
				}
				raw, _ := json.Marshal(result(req.ID, map[string]any{"tools": tools}))
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "data: %s\n\n", raw)
			}
			up, err := gateway.Dial(t.Context(), gateway.UpstreamConfig{URL: u.url})
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			if tools, err := up.Tools(t.Context()); err != nil || len(tools) != 2200 {
				t.Fatalf("%d tools, %v", len(tools), err)
			}
		})
	}
}

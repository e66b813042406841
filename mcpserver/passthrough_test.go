package mcpserver

import (
	"encoding/json"
	"net/http"
	"reflect"
	"runtime"
	"testing"

	"github.com/idem-run/idem"
)

func TestLiftKeys(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"params key moves into _meta",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{},"idempotencyKey":"k"}}`,
			`{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"io.idem/params.idempotencyKey":"k"},"arguments":{},"name":"t"}}`},
		{"existing _meta is kept",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":3},"idempotencyKey":"k"}}`,
			`{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"io.idem/params.idempotencyKey":"k","progressToken":3},"name":"t"}}`},
		{"a key in the arguments stays there",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"idempotencyKey":"k"}}}`,
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"idempotencyKey":"k"}}}`},
		{"a key in _meta stays there",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"idempotencyKey":"k"}}}`,
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"idempotencyKey":"k"}}}`},
		{"a null key moves too, to be refused",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","idempotencyKey":null}}`,
			`{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"io.idem/params.idempotencyKey":null},"name":"t"}}`},
		{"other methods pass",
			`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"idempotencyKey":"k"}}`,
			`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"idempotencyKey":"k"}}`},
		{"a batch",
			`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","idempotencyKey":"k"}}]`,
			`[{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"io.idem/params.idempotencyKey":"k"},"name":"t"}}]`},
		{"not JSON passes", `{"idempotencyKey"`, `{"idempotencyKey"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(liftKeys([]byte(tc.in))); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestKeyOutsideArguments(t *testing.T) {
	var tool Tool
	tool.Retry.Kind = "same_key_replay"
	for _, tc := range []struct {
		name, arg string
		meta      map[string]any
		want      string
		fails     bool
	}{
		{"none", "", nil, "", false},
		{"argument only", "a", nil, "a", false},
		{"_meta only", "", map[string]any{MetaIdempotencyKey: "m"}, "m", false},
		{"params only", "", map[string]any{liftedKey: "p"}, "p", false},
		{"the same key twice", "a", map[string]any{MetaIdempotencyKey: "a", liftedKey: "a"}, "a", false},
		{"two keys", "a", map[string]any{MetaIdempotencyKey: "b"}, "", true},
		{"not a string", "", map[string]any{MetaIdempotencyKey: json.Number("1")}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := keyOutsideArguments(tool, tc.meta, tc.arg)
			if (err != nil) != tc.fails || got != tc.want {
				t.Errorf("got %q, %v", got, err)
			}
		})
	}
}

// storedResult is an idem gateway's stored answer holding body.
func storedResult(body string) idem.Result {
	return idem.RawResult(http.StatusOK, http.Header{"Content-Type": {ToolResultMediaType}}, []byte(body), &idem.Meta{})
}

// A stored tool result is served as the SDK would serve it after
// decoding it (the same members and values), every kind of content
// included; one the fast reading does
// not handle (an input_required result) is read by the SDK.
func TestToolResultOfServesTheStoredResult(t *testing.T) {
	for _, body := range []string{
		`{"content":[{"type":"text","text":"hi","annotations":{"audience":["user"],"priority":0.5},"_meta":{"a":1}},` +
			`{"type":"image","data":"aGk=","mimeType":"image/png"},{"type":"audio","data":"aGk=","mimeType":"audio/wav"},` +
			`{"type":"resource_link","uri":"file:///x","name":"x","title":"X","size":3},` +
			`{"type":"resource","resource":{"uri":"file:///y","mimeType":"text/plain","text":"y"}}],` +
			`"structuredContent":{"z":1,"a":[1,2.5,"x"]},"isError":true,"_meta":{"m":{"n":true}}}`,
		`{"content":[]}`,
		`{}`,
		`{"content":[{"type":"text","text":""}],"structuredContent":null}`,
		`{"content":[],"resultType":"input_required","inputRequests":{},"requestState":"s"}`,
	} {
		got, ok := toolResultOf(storedResult(body))
		want, wantOK := sdkToolResult([]byte(body))
		if !ok || !wantOK {
			t.Fatalf("%s: read %v, by the SDK %v", body, ok, wantOK)
		}
		g, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		w, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var gv, wv any
		if json.Unmarshal(g, &gv) != nil || json.Unmarshal(w, &wv) != nil || !reflect.DeepEqual(gv, wv) {
			t.Errorf("stored %s\nserved   %s\nSDK's    %s", body, g, w)
		}
	}
	if _, ok := toolResultOf(storedResult(`{"content":[1]}`)); ok {
		t.Error("a content that is not an object was served")
	}
}

// Reading a stored tool result does not go through the SDK's decoder,
// which allocates a 32 KiB buffer per value (go-sdk v1.8.0): the gateway
// reads one for every tool call it answers (issue 34). The bound is
// bytes, not time.
func TestToolResultOfAllocatesLittle(t *testing.T) {
	res := storedResult(`{"content":[{"type":"text","text":"{\"id\":\"it-1\",\"name\":\"bench\"}"}]}`)
	toolResultOf(res)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 100
	for range n {
		if _, ok := toolResultOf(res); !ok {
			t.Fatal("not read")
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 4<<10 {
		t.Fatalf("reading a stored tool result allocated %d bytes, want at most 4 KiB", per)
	}
}

package gateway

import (
	"encoding/json"
	"testing"
)

// A relayed message is tagged with its call, over any io.idem/call the
// upstream wrote; the SSE event keeps its other fields; other messages
// are left as they are.
func TestTaggedMessages(t *testing.T) {
	in := `{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"_meta":{"io.idem/call":"forged","x":1},"maxTokens":5}}`
	out, method := tagged([]byte(in), "mine")
	if method != "sampling/createMessage" {
		t.Fatalf("method %q", method)
	}
	var msg struct {
		ID     int `json:"id"`
		Params struct {
			Meta      map[string]any `json:"_meta"`
			MaxTokens int            `json:"maxTokens"`
		} `json:"params"`
	}
	if err := json.Unmarshal(out, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.ID != 3 || msg.Params.MaxTokens != 5 || msg.Params.Meta[metaCall] != "mine" || msg.Params.Meta["x"] != float64(1) {
		t.Fatalf("tagged: %s", out)
	}
	if out, _ := tagged([]byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`), "mine"); !json.Valid(out) || string(out) == "" {
		t.Fatalf("a notification without _meta: %s", out)
	}
	for _, other := range []string{
		`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"\"sampling/createMessage\""}]}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`,
		`{"jsonrpc":"2.0","method":"sampling/createMessage","params":[1]}`,
		`not json`,
	} {
		if out, _ := tagged([]byte(other), "mine"); out != nil {
			t.Errorf("%s tagged: %s", other, out)
		}
	}

	event := "id: 7\nevent: message\ndata: {\"a\":\ndata: 1}\n\n"
	if got := string(withData([]byte(event), []byte(`{"a":1}`))); got != "id: 7\nevent: message\ndata: {\"a\":1}\n\n" {
		t.Fatalf("withData: %q", got)
	}
}

// BenchmarkRelayPerCall is what relaying adds to each call: its entry
// among the calls in flight (a random tag), and the scan of its answer
// (a 4 KiB tool result event, which names no relayed method) as it is
// read.
func BenchmarkRelayPerCall(b *testing.B) {
	u := &Upstream{}
	result := []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + string(make([]byte, 4096)) + `"}]}}`)
	for i := range result {
		if result[i] == 0 {
			result[i] = 'x'
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		call, leave := u.enter(b.Context(), "")
		if isRequest(result) {
			b.Fatal("a result taken for a message to relay")
		}
		call.settle(b.Context())
		leave()
	}
}

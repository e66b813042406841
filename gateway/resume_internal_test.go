package gateway

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// stream is a call's SSE stream over body, as the gateway's transport
// makes it for the answer to a POST.
func stream(t *testing.T, body string) *resumingStream {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://upstream.test/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp := &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(body))}
	d := &dispatch{limit: 1 << 20, tail: make(chan struct{})}
	return newResumingStream(t.Context(), r, resp, nil, []byte("1"), d, 1<<20, func() {}, func() {})
}

// An event longer than the stream's read buffer passes whole and
// unchanged, and the stream ends after the answer.
func TestResumingStreamPassesALongEventWhole(t *testing.T) {
	answer := `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 100<<10) + `"}]}}`
	body := "id: e1\ndata: " + answer + "\n\n"
	got, err := io.ReadAll(stream(t, body))
	if err != nil || string(got) != body {
		t.Fatalf("read %d bytes (%v), want the %d of the event", len(got), err, len(body))
	}
}

// A call's stream costs a few KiB, not a 32 KiB read buffer per call
// (issue 34: one is made for every tools/call over SSE). The bound is
// bytes, not time.
func TestResumingStreamAllocatesLittle(t *testing.T) {
	body := "id: e1\ndata: " + `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}` + "\n\n"
	read := func() {
		if got, err := io.ReadAll(stream(t, body)); err != nil || string(got) != body {
			t.Fatalf("read %q, %v", got, err)
		}
	}
	read()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 50
	for range n {
		read()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 16<<10 {
		t.Fatalf("a call's stream allocated %d bytes, want at most 16 KiB", per)
	}
}

package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem/gateway"
)

// bigAnswer writes an answer to req of about size bytes (one text content
// block), a chunk at a time, as JSON or as one SSE event; done says
// whether every byte of it was written (the gateway read it whole).
func bigAnswer(sse bool, size int, done *atomic.Bool) func(http.ResponseWriter, *http.Request, rpc) {
	return func(w http.ResponseWriter, _ *http.Request, req rpc) {
		head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, req.ID)
		if sse {
			w.Header().Set("Content-Type", "text/event-stream")
			head = "data: " + head
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		if _, err := w.Write([]byte(head)); err != nil {
			return
		}
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		tail := `"}]}}`
		if sse {
			tail += "\n\n"
		}
		if _, err := w.Write([]byte(tail)); err == nil {
			http.NewResponseController(w).Flush()
			done.Store(true)
		}
	}
}

// TestGatewayResultOverTheBoundIsNotRead (issue 33 item 3): an upstream
// answering a tools/call with far more than the bound, as a JSON body or
// as an SSE event: the gateway stops reading at the bound (the upstream
// cannot write its answer out), the call is indeterminate with a message
// naming the bound, and the session serves the next call.
func TestGatewayResultOverTheBoundIsNotRead(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			u := newRawUpstream(t)
			var done atomic.Bool
			u.call = bigAnswer(sse, 64<<20, &done)
			gw, _ := gatewayOver(t, gateway.UpstreamConfig{URL: u.url, MaxResultBytes: 256 << 10}, addOverlay)
			status, body := post(t, gw, "add", "big-1", `{}`)
			if status != http.StatusInternalServerError || !strings.Contains(body, "exceeded 262144 bytes") {
				t.Fatalf("a 64 MiB answer: %d %.300s", status, body)
			}
			if done.Load() {
				t.Fatal("the gateway read the whole 64 MiB answer")
			}
			status, body = post(t, gw, "add", "big-1", `{}`)
			if status != http.StatusConflict || !strings.Contains(body, "IDEMPOTENCY_RESULT_INDETERMINATE") {
				t.Fatalf("the same key again: %d %.300s", status, body)
			}
			u.call = nil
			if status, body := post(t, gw, "add", "big-2", `{}`); status != http.StatusOK {
				t.Fatalf("the next call: %d %.300s", status, body)
			}
			if n, s := u.calls.Load(), u.sessions.Load(); n != 2 || s != 1 {
				t.Fatalf("the upstream ran %d calls in %d sessions, want 2 in 1", n, s)
			}
		})
	}
}

// TestGatewayResultOverTheStoredBoundSaysSo: a result read whole (under
// the read bound) but over the 1 MiB the gateway stores is
// EXECUTION_FAILED with a message naming that bound (it said only
// "operation add failed" before).
func TestGatewayResultOverTheStoredBoundSaysSo(t *testing.T) {
	u := newRawUpstream(t)
	var done atomic.Bool
	u.call = bigAnswer(false, 2<<20, &done)
	gw, _ := gatewayOver(t, gateway.UpstreamConfig{URL: u.url}, addOverlay)
	status, body := post(t, gw, "add", "stored-1", `{}`)
	if status != http.StatusInternalServerError || !strings.Contains(body, "over the 1048576 the gateway stores") {
		t.Fatalf("a 2 MiB result: %d %.400s", status, body)
	}
}

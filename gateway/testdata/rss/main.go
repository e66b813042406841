// Measures peak RSS of one gateway.Upstream call answered with a big
// JSON (or SSE) body by an in-process raw upstream that streams it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"

	"github.com/idem-run/idem/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	size := 200 << 20
	sse := len(os.Args) > 1 && os.Args[1] == "sse"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" {
			http.Error(w, "", 405)
			return
		}
		var req struct {
			ID     json.RawMessage
			Method string
		}
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &req)
		w.Header().Set("Mcp-Session-Id", "s1")
		switch req.Method {
		case "initialize":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"big","version":"1"}}}`, req.ID)
		case "tools/call":
			pre := ""
			if sse {
				w.Header().Set("Content-Type", "text/event-stream")
				pre = "data: "
			} else {
				w.Header().Set("Content-Type", "application/json")
			}
			fmt.Fprintf(w, `%s{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, pre, req.ID)
			chunk := bytes.Repeat([]byte("a"), 64<<10)
			for n := 0; n < size; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			fmt.Fprint(w, `"}]}}`)
			if sse {
				fmt.Fprint(w, "\n\n")
			}
		default:
			if req.ID == nil {
				w.WriteHeader(202)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, req.ID)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	up, err := gateway.Dial(ctx, gateway.UpstreamConfig{URL: srv.URL})
	if err != nil {
		panic(err)
	}
	res, err := up.Call(ctx, &mcp.CallToolParams{Name: "big", Arguments: map[string]any{}})
	msg := fmt.Sprint(err)
	if len(msg) > 160 {
		msg = msg[:160]
	}
	n := 0
	if res != nil {
		n = len(res.Content)
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Printf("sse=%v result blocks=%d err=%s\npeak RSS %d MiB\n", sse, n, msg, ru.Maxrss>>10)
}

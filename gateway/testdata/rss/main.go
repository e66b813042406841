// Measures the peak RSS of the gateway's upstream client (issue 33 items
// 2 and 3) against an in-process raw upstream that streams what it says:
//
//	go run ./gateway/testdata/rss          # one call answered with 200 MiB of JSON
//	go run ./gateway/testdata/rss sse      # the same as one SSE event
//	go run ./gateway/testdata/rss pages    # tools/list pages forever (stopped after 20 s)
//	go run ./gateway/testdata/rss tools    # tools/list of 20,000 tools
//	go run ./gateway/testdata/rss enum     # a tool with a 1,000,000-value enum, built
//
// With a second argument "serve" it only serves that upstream (its URL on
// stdout) for an idem gateway process to be measured against; the tool
// of the answer modes is "big".
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idem-run/idem/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	size := 200 << 20
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	sse := mode == "sse"
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
		case "tools/list":
			w.Header().Set("Content-Type", "application/json")
			listPage(w, mode, req.ID, b)
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
	if len(os.Args) > 2 && os.Args[2] == "serve" {
		fmt.Println(srv.URL)
		select {}
	}
	ctx := context.Background()
	up, err := gateway.Dial(ctx, gateway.UpstreamConfig{URL: srv.URL})
	if err != nil {
		panic(err)
	}
	if mode == "pages" || mode == "tools" || mode == "enum" {
		list(ctx, up, mode)
		return
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

// listPage answers tools/list as mode says.
func listPage(w io.Writer, mode string, id json.RawMessage, body []byte) {
	var req struct{ Params struct{ Cursor string } }
	json.Unmarshal(body, &req)
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[`, id)
	switch mode {
	case "pages":
		n, _ := strconv.Atoi(req.Params.Cursor)
		fmt.Fprintf(w, `{"name":"t%d","description":%q,"inputSchema":{"type":"object"}}],"nextCursor":"%d"}}`, n, strings.Repeat("d", 1000), n+1)
		return
	case "tools":
		for i := range 20000 {
			if i > 0 {
				fmt.Fprint(w, ",")
			}
			fmt.Fprintf(w, `{"name":"t%d","description":"a tool","inputSchema":{"type":"object","properties":{"a":{"type":"string"}}}}`, i)
		}
	case "", "sse":
		fmt.Fprint(w, `{"name":"big","inputSchema":{"type":"object"}}`)
	case "enum":
		fmt.Fprint(w, `{"name":"pick","inputSchema":{"type":"object","properties":{"id":{"type":"string","enum":[`)
		for i := range 1_000_000 {
			if i > 0 {
				fmt.Fprint(w, ",")
			}
			fmt.Fprintf(w, `"v%d"`, i)
		}
		fmt.Fprint(w, `]}}}}`)
	}
	fmt.Fprint(w, `]}}`)
}

// list lists the tools (at most 20 s) and builds the operations.
func list(ctx context.Context, up *gateway.Upstream, mode string) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tools, err := up.Tools(ctx)
	msg := fmt.Sprint(err)
	if len(msg) > 200 {
		msg = msg[:200]
	}
	served := 0
	if err == nil {
		built, berr := gateway.Build(tools, nil, up, gateway.Options{})
		if berr != nil {
			msg = berr.Error()
		} else {
			served = len(built.Operations)
			for _, w := range built.Warnings {
				if len(w) > 200 {
					w = w[:200]
				}
				fmt.Println("warning:", w)
			}
		}
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Printf("%s: %d tools listed, %d served, err=%s\npeak RSS %d MiB\n", mode, len(tools), served, msg, ru.Maxrss>>10)
}

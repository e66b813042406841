package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/idem-run/idem/proxy"
)

// The bounds of an upstream's tools/list (issue 33 item 2), the proxy's
// document bounds where they have a counterpart: a hostile or broken
// upstream that pages forever or lists without end keeps the gateway
// from starting (and a reload keeps the running tools) with a message
// saying which bound it passed, instead of growing without end.
const (
	// MaxTools is the most tools the gateway serves of one upstream
	// (proxy.MaxOperations).
	MaxTools = proxy.MaxOperations
	// MaxToolPages is the most pages of tools/list read.
	MaxToolPages = 1000
	// MaxToolListBytes bounds the answers of all pages of one listing
	// together (proxy.MaxSchemaBytes).
	MaxToolListBytes = proxy.MaxSchemaBytes
	// MaxToolDepth is the deepest a tool's JSON may nest; a deeper tool is
	// left out with a warning (the SDK refuses a page nested deeper than
	// 1000 levels whole, which would take the other tools with it).
	MaxToolDepth = 128
	// MaxToolListDuration bounds one listing, all its pages: an upstream
	// that answers a byte at a time is not waited for without end.
	MaxToolListDuration = time.Minute
)

// listPage edits one tools/list answer before the SDK decodes it: it
// leaves out the tools nested deeper than MaxToolDepth (noting their
// names) and the tools past room.
type listPage struct {
	room int // tools this page may still bring

	mu      sync.Mutex
	skipped []string // the tools left out as too deep
	tooMany bool     // the page brought more than room
}

// edit returns body, a JSON-RPC answer, with its result's tools edited;
// body as it is when it is no tools/list result (an error, or not JSON:
// the SDK says what is wrong).
func (l *listPage) edit(body []byte) []byte {
	var msg map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil || msg["result"] == nil {
		return body
	}
	var result map[string]json.RawMessage
	if json.Unmarshal(msg["result"], &result) != nil || result["tools"] == nil {
		return body
	}
	var tools []json.RawMessage
	if json.Unmarshal(result["tools"], &tools) != nil {
		return body
	}
	kept := tools[:0]
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range tools {
		if depth(t) > MaxToolDepth {
			var named struct{ Name string }
			json.Unmarshal(t, &named)
			l.skipped = append(l.skipped, named.Name)
			continue
		}
		if len(kept) >= l.room {
			l.tooMany = true
			break
		}
		kept = append(kept, t)
	}
	if len(kept) == len(tools) {
		return body
	}
	result["tools"], _ = json.Marshal(kept)
	msg["result"], _ = json.Marshal(result)
	out, err := json.Marshal(msg)
	if err != nil {
		return body
	}
	return out
}

// editStream edits the JSON-RPC answer carried by an SSE stream: it reads
// the stream's events (at most limit bytes) up to the first that carries
// an answer, and returns them with that answer edited. The stream ends
// there: a tools/list stream has nothing more to say.
func (l *listPage) editStream(body io.Reader, limit int64) ([]byte, bool) {
	r := bufio.NewReader(io.LimitReader(body, limit+1))
	var out, event bytes.Buffer
	var data []string
	read := int64(0)
	for {
		line, err := r.ReadString('\n')
		read += int64(len(line))
		if read > limit {
			return nil, false
		}
		trimmed := strings.TrimRight(line, "\r\n")
		if trimmed == "" && line != "" || err != nil {
			// The end of an event (or of the stream).
			if len(data) > 0 {
				payload := []byte(strings.Join(data, "\n"))
				var probe struct {
					ID     json.RawMessage `json:"id"`
					Result json.RawMessage `json:"result"`
					Error  json.RawMessage `json:"error"`
				}
				if json.Unmarshal(payload, &probe) == nil && len(probe.ID) > 0 && (probe.Result != nil || probe.Error != nil) {
					for _, f := range strings.Split(strings.TrimRight(event.String(), "\n"), "\n") {
						if f != "" && !strings.HasPrefix(f, "data:") {
							out.WriteString(f + "\n")
						}
					}
					out.WriteString("data: ")
					out.Write(l.edit(payload))
					out.WriteString("\n\n")
					return out.Bytes(), true
				}
			}
			out.Write(event.Bytes())
			if trimmed == "" && line != "" {
				out.WriteString("\n")
			}
			event.Reset()
			data = data[:0]
			if err != nil {
				return out.Bytes(), true
			}
			continue
		}
		event.WriteString(trimmed + "\n")
		if v, ok := strings.CutPrefix(trimmed, "data:"); ok {
			data = append(data, strings.TrimPrefix(v, " "))
		}
	}
}

// depth is how deep raw's arrays and objects nest.
func depth(raw []byte) int {
	d, most, inString, escaped := 0, 0, false, false
	for _, b := range raw {
		switch {
		case escaped:
			escaped = false
		case inString && b == '\\':
			escaped = true
		case b == '"':
			inString = !inString
		case inString:
		case b == '{' || b == '[':
			if d++; d > most {
				most = d
			}
		case b == '}' || b == ']':
			d--
		}
	}
	return most
}

// tooMuch is the error of a listing past one of the bounds.
func tooMuch(what string, bound int) error {
	return fmt.Errorf("the upstream's tools/list passed the gateway's bound of %d %s (a gateway serves at most %d tools of an upstream, read from at most %d pages of at most %d MiB together): serve fewer tools from it, or split it across upstreams",
		bound, what, MaxTools, MaxToolPages, MaxToolListBytes>>20)
}

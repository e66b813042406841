package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxIdleResumptions bounds the resumptions in a row that bring no new
// event id; the call's timeout bounds the rest.
const maxIdleResumptions = 100

// What is read of a call's SSE stream after its answer: an upstream ends
// the stream once it has answered (MCP: it SHOULD close it), and the
// gateway reads that end, so that net/http keeps the connection for the
// next call (a stream cut before its end closes it). The answer is held
// for that read at most streamTailHold (Upstream.Call); the read itself
// goes on in the background for at most streamTailWait and
// maxStreamTail bytes (events after the answer are dropped, as the SDK
// drops them), and the connection is closed past either.
const (
	streamTailHold = 10 * time.Millisecond
	streamTailWait = time.Second
	maxStreamTail  = 64 << 10
)

// resumingStream is a call's SSE stream as the SDK reads it: the
// upstream's answer to the POST and, when that ends before the call's
// answer came, the streams the gateway resumes with Last-Event-ID
// (SEP-1699, MCP 2025-11-25), joined into one, a whole event at a time.
//
// The gateway resumes rather than leaving it to the SDK because the SDK
// (go-sdk v1.8.0, streamableClientConn.handleSSE) forgets the event id it
// resumed from: when a resumed stream ends before an event with an id
// (an upstream that polls: it closes the stream while the call runs and
// answers on a later resumption), the SDK fails the call ("request
// terminated without response") though the upstream answers it on the
// next resumption; and after MaxRetries resumptions without a new id it
// fails the whole session. The gateway keeps the last id seen and
// resumes with it, waiting the upstream's retry each time, until the
// answer comes, the call's context ends, or the upstream refuses.
//
// Every event passes whole and unchanged, so the SDK decodes what the
// upstream sent; an event over limit fails the call as eventBound does.
// Once the answer has passed, the stream is read to its end (see
// streamTailWait) and then reports io.EOF.
type resumingStream struct {
	ctx    context.Context // the call's
	unlink func()          // the current exchange's (detach)
	cut    func()
	next   http.RoundTripper
	url    string
	header http.Header // the POST's: session, protocol version, credentials
	callID []byte      // the call's JSON-RPC id, compact
	d      *dispatch
	limit  int64

	body io.ReadCloser
	// br reads body: bufio's default 4 KiB, since an event longer than
	// that is read on (readEvent) and most are a few hundred bytes; one
	// is made per call.
	br       *bufio.Reader
	event    bytes.Buffer // the event being read
	data     bytes.Buffer // its data
	pending  []byte       // a whole event, not yet read by the SDK
	lastID   string
	retry    time.Duration
	idle     int
	answered bool
	tail     *time.Timer // cuts the exchange when its end is slow to come
	end      sync.Once
}

func newResumingStream(ctx context.Context, r *http.Request, resp *http.Response, next http.RoundTripper, callID []byte, d *dispatch, limit int64, unlink, cut func()) *resumingStream {
	h := r.Header.Clone()
	for _, name := range []string{"Content-Type", "Content-Length", "Mcp-Method", "Mcp-Name"} {
		h.Del(name)
	}
	for name := range h {
		if strings.HasPrefix(name, "Mcp-Param-") {
			h.Del(name)
		}
	}
	h.Set("Accept", "text/event-stream")
	d.streamed.Store(true)
	return &resumingStream{ctx: ctx, unlink: unlink, cut: cut, next: next, url: r.URL.String(), header: h, callID: callID, d: d, limit: limit,
		body: resp.Body, br: bufio.NewReader(resp.Body)}
}

func (s *resumingStream) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.answered {
			s.finish(true)
			return 0, io.EOF
		}
		if err := s.readEvent(); err != nil {
			return 0, err
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// readEvent reads the next whole event into pending, resuming the stream
// when it ends first.
func (s *resumingStream) readEvent() error {
	for {
		line, err := s.br.ReadSlice('\n')
		if len(line) > 0 {
			if int64(s.event.Len()+len(line)) > s.limit {
				s.d.over.Store(true)
				if s.d.abort != nil {
					s.d.abort(errOverLimit)
				}
				return fmt.Errorf("%w (an SSE event over %d bytes)", errOverLimit, s.limit)
			}
			s.event.Write(line)
		}
		if err == bufio.ErrBufferFull {
			continue // a long line: read on
		}
		if err == nil {
			if s.endOfLine() {
				return nil
			}
			continue
		}
		// The stream ended (or broke). An event without its blank line
		// is dropped, as SSE says.
		s.event.Reset()
		s.data.Reset()
		if rerr := s.resume(); rerr != nil {
			return rerr
		}
	}
}

// endOfLine takes the line at the end of s.event; true when it ended the
// event (which is then pending).
func (s *resumingStream) endOfLine() bool {
	buf := s.event.Bytes()
	start := bytes.LastIndexByte(buf[:len(buf)-1], '\n') + 1
	line := strings.TrimRight(string(buf[start:]), "\r\n")
	if line == "" {
		var event []byte // the event as the SDK reads it
		if s.data.Len() > 0 {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(s.data.Bytes(), &m) == nil && (m.Result != nil || m.Error != nil) && compactEqual(m.ID, s.callID) {
				// The answer: the call's end no longer cuts the exchange,
				// whose end is read within streamTailWait.
				s.answered = true
				s.unlink()
				s.tail = time.AfterFunc(streamTailWait, s.cut)
			} else if s.d.call != nil && isRequest(s.data.Bytes()) {
				event = s.fromUpstream(buf)
			}
		}
		if event == nil {
			event = bytes.Clone(buf)
		}
		s.pending = event
		s.event.Reset()
		s.data.Reset()
		return true
	}
	field, value, _ := strings.Cut(line, ":")
	value = strings.TrimPrefix(value, " ")
	switch field {
	case "id":
		if value != s.lastID {
			s.lastID, s.idle = value, 0
		}
	case "retry":
		if ms, err := strconv.ParseInt(value, 10, 64); err == nil && ms >= 0 {
			s.retry = time.Duration(ms) * time.Millisecond
		}
	case "data":
		if s.data.Len() > 0 {
			s.data.WriteByte('\n')
		}
		s.data.WriteString(value)
	}
	return false
}

// resume opens the stream again from the last event id, after the
// upstream's retry (1 s when it gave none); io.EOF when it cannot be
// resumed (no event id came, or too many resumptions brought nothing),
// which leaves the SDK to end the call.
func (s *resumingStream) resume() error {
	s.body.Close()
	s.cut()
	for {
		if s.lastID == "" || s.idle >= maxIdleResumptions {
			return io.EOF
		}
		s.idle++
		wait := s.retry
		if wait <= 0 {
			wait = time.Second
		}
		timer := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return s.ctx.Err()
		case <-timer.C:
		}
		ctx, unlink, cut := detach(s.ctx)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
		if err != nil {
			cut()
			return err
		}
		req.Header = s.header.Clone()
		req.Header.Set("Last-Event-ID", s.lastID)
		resp, err := s.next.RoundTrip(req)
		if err != nil {
			cut()
			if s.ctx.Err() != nil {
				return s.ctx.Err()
			}
			continue // the connection failed: try again after the retry
		}
		media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if resp.StatusCode != http.StatusOK || media != "text/event-stream" {
			resp.Body.Close()
			cut()
			if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
				continue
			}
			return fmt.Errorf("resuming the call's stream from event %q: the upstream answered %s", s.lastID, resp.Status)
		}
		s.body, s.unlink, s.cut = resp.Body, unlink, cut
		s.br.Reset(resp.Body)
		return nil
	}
}

// finish ends the stream once: what is left of it is read first when
// drain is set (after the answer), and the exchange is ended; the call
// waiting for it (dispatch.tail) is told.
func (s *resumingStream) finish(drain bool) {
	s.end.Do(func() {
		if drain {
			io.CopyN(io.Discard, s.br, maxStreamTail)
		}
		s.body.Close()
		if s.tail != nil {
			s.tail.Stop()
		}
		s.cut()
		if s.d.tail != nil {
			// Once: a multi round-trip call (MCP 2026-07-28) is several
			// POSTs, each a stream of its own.
			s.d.tailOnce.Do(func() { close(s.d.tail) })
		}
	})
}

func (s *resumingStream) Close() error {
	s.finish(false)
	return nil
}

// fromUpstream handles a request or notification the upstream sent on
// the call's stream, whose event is buf (peers.go): one for the call's
// client is tagged with the call (the event rewritten, returned; nil when
// it is passed as it is); a log or progress message of the call is
// counted, so that the call's result waits for it.
func (s *resumingStream) fromUpstream(buf []byte) []byte {
	call := s.d.call
	if token := progressOf(s.data.Bytes()); token != "" {
		if token == call.progress {
			call.note()
		}
		return nil
	}
	data, method := tagged(s.data.Bytes(), call.tag)
	if data == nil {
		return nil
	}
	if method == "notifications/message" {
		call.note()
	}
	return withData(buf, data)
}

// withData is the SSE event with its data replaced by data: the lines
// of another field kept, one data line, the blank line.
func withData(event, data []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(event, []byte("\n")) {
		l := bytes.TrimRight(line, "\r\n")
		if len(l) == 0 {
			continue
		}
		field, _, _ := bytes.Cut(l, []byte(":"))
		if string(field) != "data" {
			out.Write(line)
		}
	}
	out.WriteString("data: ")
	out.Write(data)
	out.WriteString("\n\n")
	return out.Bytes()
}

// compactEqual says whether two JSON values are the same once compacted.
func compactEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// callIDOf is the JSON-RPC id of the request in payload; nil for a
// notification or a response.
func callIDOf(payload func() (io.ReadCloser, error)) []byte {
	if payload == nil {
		return nil
	}
	rc, err := payload()
	if err != nil {
		return nil
	}
	defer rc.Close()
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.NewDecoder(rc).Decode(&req) != nil || req.Method == "" || len(req.ID) == 0 || string(req.ID) == "null" {
		return nil
	}
	return req.ID
}

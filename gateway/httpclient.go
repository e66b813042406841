package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"github.com/idem-run/idem/internal/keptconn"
)

// DefaultMaxResultBytes bounds what the gateway reads of one upstream
// answer (a JSON body, one SSE event, one stdio line) before it holds it
// in memory: the stored result's bound (MaxStoredResult) and room for the
// JSON-RPC envelope and the escapes a re-encoding removes.
const DefaultMaxResultBytes = 4 * MaxStoredResult

// dispatch records what became of one request's HTTP exchanges (a call's
// POST, the GETs that resume its stream) or of its writes to a spawned
// upstream's stdin; Call and Tools read it once the SDK returns.
type dispatch struct {
	// wrote: a byte of the request may have gone (its HTTP headers were
	// written, or a byte went to stdin). stale: the POST was not sent,
	// on a kept-alive connection (most likely one the upstream had
	// closed: it restarted, or its idle timeout passed); a new one may
	// take it.
	wrote atomic.Bool
	stale atomic.Bool
	// status is the HTTP status of the answer to the POST; session
	// whether that POST named an Mcp-Session-Id; answered whether its
	// (non-2xx) body was a JSON-RPC response naming a request id.
	status   atomic.Int32
	session  atomic.Bool
	answered atomic.Bool
	// limit bounds each answer read for the request (0: the
	// upstream's); over is set when one exceeded it, and abort (when
	// set) then ends the request at once.
	limit int64
	over  atomic.Bool
	abort context.CancelCauseFunc
	// read counts the bytes of answers read whole here (JSON bodies, a
	// tools/list's SSE stream).
	read atomic.Int64
	// list, when set, edits a tools/list page before the SDK decodes it.
	list *listPage
	// streamed says the call's answer came on an SSE stream
	// (resumingStream), which closes tail (when set) once it has read
	// that stream to its end or given up.
	streamed atomic.Bool
	tail     chan struct{}
	tailOnce sync.Once
	// call is the tool call in flight (Upstream.enter): what the upstream
	// sends on the call's stream for its client is tagged with it.
	call *inflight
}

type dispatchKey struct{}

func dispatchOf(ctx context.Context) *dispatch {
	d, _ := ctx.Value(dispatchKey{}).(*dispatch)
	return d
}

// sessionGone says whether the upstream refused the POST for its session
// before running anything: 404 for the Mcp-Session-Id it named (MCP: the
// session is over, start a new one), or 400 without a JSON-RPC answer to
// a request (an upstream that says 400 for a session it does not know).
// MCP says a server that cannot accept a message answers an error status
// and no result, so nothing of it ran.
func (d *dispatch) sessionGone() bool {
	if !d.session.Load() {
		return false
	}
	switch d.status.Load() {
	case http.StatusNotFound:
		return true
	case http.StatusBadRequest:
		return !d.answered.Load()
	}
	return false
}

// errOverLimit is the error of an answer that exceeded its bound.
var errOverLimit = errors.New("the upstream's answer exceeded the gateway's bound")

// tracked is the HTTP upstream's transport. It adds the configured
// headers; makes every request with a body impossible for net/http to
// send twice (SPEC §17, issue 33 item 1: idem decides every re-send);
// records, for a request whose context carries a *dispatch, whether it
// was written and how the upstream answered it; and bounds what is read
// of each answer: a JSON body is read here, at most limit bytes, and an
// SSE stream's events are counted as they pass, so no answer is held in
// memory whole before its size is known.
type tracked struct {
	header http.Header
	next   http.RoundTripper
	limit  int64
}

func (t *tracked) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for name, values := range t.header {
		r.Header[http.CanonicalHeaderKey(name)] = values
	}
	var payload func() (io.ReadCloser, error)
	if r.Body != nil && r.Body != http.NoBody {
		// net/http re-sends a request on a reused connection that broke
		// (HTTP/1: a GET, or any request with an Idempotency-Key header,
		// which --upstream-header may set; HTTP/2: after GOAWAY or a
		// stream reset) only when it can rewind its body with GetBody.
		// Without GetBody, a request whose body went is never sent again.
		payload, r.GetBody = r.GetBody, nil
	}
	d := dispatchOf(r.Context())
	parent := r.Context()
	unlink, cut := func() {}, func() {}
	var watch keptconn.Watch // the POST's connection, and its count of bytes written when the POST got it
	if d != nil && r.Method == http.MethodPost {
		d.session.Store(r.Header.Get("Mcp-Session-Id") != "")
		trace := &httptrace.ClientTrace{
			GotConn:      watch.GotConn,
			WroteHeaders: func() { d.wrote.Store(true) },
		}
		ctx := parent
		if d.list == nil {
			// A call's exchange outlives the call's context until its
			// answer is read to the end (resumingStream), so that the
			// connection is kept for the next call.
			ctx, unlink, cut = detach(parent)
		}
		r = r.WithContext(httptrace.WithClientTrace(ctx, trace))
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		cut()
		if watch.Unwritten() {
			// WroteHeaders tells of headers put in the connection's
			// buffer; not a byte of them reached the socket. (net/http
			// returns a round trip's error once its write has ended;
			// the pool sets no ResponseHeaderTimeout, whose does not.)
			d.wrote.Store(false)
			d.stale.Store(watch.Stale())
		}
		return nil, err
	}
	limit := t.limit
	if d != nil && d.limit > 0 {
		limit = d.limit
	}
	if d != nil && r.Method == http.MethodPost {
		d.status.Store(int32(resp.StatusCode))
	}
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if media == "text/event-stream" {
		if d != nil && d.list == nil && r.Method == http.MethodPost && resp.StatusCode == http.StatusOK {
			if id := callIDOf(payload); id != nil {
				resp.Body = newResumingStream(parent, r, resp, t.next, id, d, limit, unlink, cut)
				return resp, nil
			}
		}
		if d == nil || d.list == nil || resp.StatusCode/100 != 2 {
			resp.Body = &eventBound{body: resp.Body, limit: limit, d: d, cut: cut}
			return resp, nil
		}
		body, ok := d.list.editStream(resp.Body, limit)
		resp.Body.Close()
		d.read.Add(int64(len(body)))
		if !ok {
			d.over.Store(true)
			return nil, fmt.Errorf("%w (%d bytes)", errOverLimit, limit)
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, nil
	}
	if resp.Body == nil || resp.Body == http.NoBody || limit <= 0 {
		if resp.Body != nil && resp.Body != http.NoBody {
			resp.Body = &eventBound{body: resp.Body, d: d, cut: cut}
		} else {
			cut()
		}
		return resp, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	resp.Body.Close()
	cut()
	if d != nil {
		d.read.Add(int64(len(body)))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the upstream's answer: %w", err)
	}
	if int64(len(body)) > limit {
		// Answer the request with a JSON-RPC error of its own id, so that
		// the SDK ends this request and keeps the session; the caller of
		// Call or Tools learns why from d.over.
		if d != nil {
			d.over.Store(true)
		}
		body = overLimitAnswer(payload, limit)
		if body == nil {
			return nil, fmt.Errorf("%w (%d bytes)", errOverLimit, limit)
		}
	} else if d != nil && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(body, &m) == nil && len(m.ID) > 0 && string(m.ID) != "null" {
			d.answered.Store(true)
		}
	} else if d != nil && d.list != nil && resp.StatusCode/100 == 2 {
		body = d.list.edit(body)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// overLimitAnswer is a JSON-RPC error answering the request in payload,
// nil when it names no id.
func overLimitAnswer(payload func() (io.ReadCloser, error), limit int64) []byte {
	if payload == nil {
		return nil
	}
	rc, err := payload()
	if err != nil {
		return nil
	}
	defer rc.Close()
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	if json.NewDecoder(rc).Decode(&req) != nil || len(req.ID) == 0 || string(req.ID) == "null" {
		return nil
	}
	out, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID,
		"error": map[string]any{"code": -32603, "message": fmt.Sprintf("the upstream's answer exceeded %d bytes, the gateway's bound; it was not read", limit)}})
	return out
}

// eventBound passes an SSE stream through, failing it once one event (the
// bytes since the last blank line) exceeds limit: the SDK buffers an
// event whole before it decodes it.
type eventBound struct {
	body  io.ReadCloser
	limit int64
	d     *dispatch
	cut   func() // ends the exchange's own context (detach)
	n     int64  // bytes of the current event
	nl    bool   // the last byte was the end of a line
}

func (e *eventBound) Read(p []byte) (int, error) {
	n, err := e.body.Read(p)
	if e.limit <= 0 {
		return n, err
	}
	for i, b := range p[:n] {
		switch b {
		case '\r':
			continue
		case '\n':
			if e.nl {
				e.n = 0 // a blank line ends the event
			}
			e.nl = true
			continue
		}
		e.nl = false
		e.n++
		if e.n > e.limit {
			if e.d != nil {
				e.d.over.Store(true)
				if e.d.abort != nil {
					e.d.abort(errOverLimit)
				}
			}
			return i, fmt.Errorf("%w (an SSE event over %d bytes)", errOverLimit, e.limit)
		}
	}
	return n, err
}

func (e *eventBound) Close() error {
	err := e.body.Close()
	if e.cut != nil {
		e.cut()
	}
	return err
}

// detach is a context for one HTTP exchange of a call, ended with parent
// until unlink is called, and by cut. A call's answer, once read, unlinks
// its exchange: the call's own end (Upstream.Call ends its context as it
// returns) then no longer cuts it, and what is left of the answer (an SSE
// stream's end) is read, so that net/http keeps the connection.
func detach(parent context.Context) (ctx context.Context, unlink, cut func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	stop := context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
	return ctx, func() { stop() }, func() {
		stop()
		cancel(context.Canceled)
	}
}

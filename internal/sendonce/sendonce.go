// Package sendonce holds an outgoing HTTP request to one send: Go's
// transports never send it a second time by themselves (issue 33 item 1).
//
// net/http's Transport re-sends a request on a new connection when a
// reused kept-alive one breaks after the request was written, if the
// request looks replayable: a GET, HEAD, OPTIONS or TRACE, or any request
// carrying an Idempotency-Key or X-Idempotency-Key header (the exact map
// key), whose body is absent or rewindable (Request.isReplayable,
// persistConn.shouldRetryRequest). Its HTTP/2 transport re-sends a request
// whose body is absent or rewindable after a GOAWAY, a REFUSED_STREAM or a
// peer's PROTOCOL_ERROR (http2shouldRetryRequest). For a call that may
// change the world only idem may decide a re-send: Hold takes away what
// those rules need and nothing else, so the request keeps its kept-alive
// connection.
package sendonce

import (
	"io"
	"net/http"
)

// Hold makes r a request that no transport of net/http sends a second
// time on its own:
//
//   - a body is made unrewindable (GetBody nil), which both rules need;
//   - the key headers go under their lower-case names (case-insensitive
//     on the wire), which HTTP/1.1's exact lookup misses;
//   - a GET, HEAD, DELETE or OPTIONS without a body gets an empty,
//     unrewindable one, written as before: no body, no length. Another
//     method without a body (POST, PUT, PATCH) keeps Content-Length: 0
//     over http, where HTTP/1.1 holds it by its method; over https, where
//     HTTP/2 may carry it, it gets the empty body too, and over HTTP/1.1
//     then goes without Content-Length (a request without one has no
//     body, RFC 9112 §6.3) rather than chunked, which a server that
//     cannot read chunked bodies would take for the start of the next
//     request.
//
// Not held: such a bodiless request over unencrypted HTTP/2 (h2c), which
// none of idem's clients speak. Redirects that need to resend the body
// (307, 308) are not followed, which idem's clients never do anyway.
func Hold(r *http.Request) {
	r.GetBody = nil
	for _, name := range [...][2]string{{"Idempotency-Key", "idempotency-key"}, {"X-Idempotency-Key", "x-idempotency-key"}} {
		if v, ok := r.Header[name[0]]; ok {
			delete(r.Header, name[0])
			r.Header[name[1]] = v
		}
	}
	if r.Body != nil && r.Body != http.NoBody {
		return
	}
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions:
	default:
		if r.URL != nil && r.URL.Scheme == "http" {
			return
		}
	}
	// "identity": HTTP/1.1 writes the empty body with no length and no
	// chunks, without the probe (a goroutine and a timer) it gives a body
	// of unknown length.
	r.Body, r.ContentLength, r.TransferEncoding = empty{}, 0, []string{"identity"}
}

// empty is a body with nothing in it that is not http.NoBody (which the
// transports treat as no body, hence replayable).
type empty struct{}

func (empty) Read([]byte) (int, error)         { return 0, io.EOF }
func (empty) WriteTo(io.Writer) (int64, error) { return 0, nil } // io.Copy needs no buffer
func (empty) Close() error                     { return nil }

// Package sendonce holds an outgoing HTTP request to one send: Go's
// transports never send it a second time by themselves (issue 33 item 1).
//
// net/http's Transport re-sends a request on a new connection when a
// reused kept-alive one breaks after the request was written, if the
// request looks replayable: a GET, HEAD, OPTIONS or TRACE, or any request
// carrying an Idempotency-Key or X-Idempotency-Key header, whose body is
// absent or rewindable (Request.isReplayable, persistConn.shouldRetryRequest).
// Its HTTP/2 transport re-sends a request whose body is absent or
// rewindable after a GOAWAY, a REFUSED_STREAM or a peer's PROTOCOL_ERROR,
// up to six times (http2shouldRetryRequest). For a call that may change
// the world, only idem may decide a re-send: Hold takes away what both
// rules need, a body that is absent or rewindable, and nothing else, so
// the request keeps its kept-alive connection.
package sendonce

import (
	"io"
	"net/http"
)

// Hold makes r a request no transport of net/http sends a second time on
// its own: its body is non-nil and cannot be rewound (GetBody nil). A
// request without a body gets an empty one; on HTTP/1.1 a GET, HEAD,
// DELETE or OPTIONS is written as before (the transport finds the body
// empty), and another method without a body goes with an empty chunked
// body instead of Content-Length: 0. Redirects that need to resend the
// body (307, 308) are then not followed, which idem's clients never do.
func Hold(r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		r.Body = empty{}
		r.ContentLength = 0
	}
	r.GetBody = nil
}

// empty is a body with nothing in it that is not http.NoBody (which the
// transports treat as no body, hence replayable).
type empty struct{}

func (empty) Read([]byte) (int, error) { return 0, io.EOF }
func (empty) Close() error             { return nil }

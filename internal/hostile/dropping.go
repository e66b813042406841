package hostile

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// DroppingHTTP1 is an HTTP/1.1 server on a raw socket that answers the
// first request of each connection, keeping the connection alive, and
// drops the connection unanswered after reading the second: what makes
// Go's transport send a replayable request again on a new connection.
type DroppingHTTP1 struct {
	// URL is http://host:port.
	URL string
	// Answer, set before the first request, gives the JSON body of a
	// request's 200 answer and whether the request counts as an effect
	// (nil: "{}" and every request is one).
	Answer func(r *http.Request) (body string, effect bool)

	ln                         net.Listener
	effects, answered, dropped atomic.Int32
}

// NewDroppingHTTP1 listens on a loopback port; Start serves, Close stops.
func NewDroppingHTTP1() (*DroppingHTTP1, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &DroppingHTTP1{URL: "http://" + ln.Addr().String(), ln: ln}, nil
}

// Start accepts connections until Close.
func (s *DroppingHTTP1) Start() {
	go func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
}

// Close stops listening.
func (s *DroppingHTTP1) Close() error { return s.ln.Close() }

// Effects is how many effects the server has read; Answered and Dropped
// split them by what became of their connection.
func (s *DroppingHTTP1) Effects() int32  { return s.effects.Load() }
func (s *DroppingHTTP1) Answered() int32 { return s.answered.Load() }
func (s *DroppingHTTP1) Dropped() int32  { return s.dropped.Load() }

func (s *DroppingHTTP1) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		body, effect := "{}", true
		if s.Answer != nil {
			body, effect = s.Answer(req)
		}
		if effect {
			s.effects.Add(1)
		}
		if n == 2 {
			if effect {
				s.dropped.Add(1)
			}
			return
		}
		if effect {
			s.answered.Add(1)
		}
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
}

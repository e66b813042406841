// Package hostile holds upstreams that misbehave on purpose, for tests of
// what idem's HTTP clients do under them (issue 33 item 1): an HTTP/1.1
// server that drops kept-alive connections after reading a request, and
// an HTTP/2 one that resets streams or goes away after reading them.
package hostile

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
)

// ResettingHTTP2 is an HTTP/2 server (prior knowledge, no TLS) on a raw
// socket that speaks just enough of the protocol to read a request: it
// counts each HEADERS frame as an effect and answers it with RST_STREAM
// PROTOCOL_ERROR, or with GOAWAY naming no stream as processed (GoAway),
// either of which Go's HTTP/2 transport takes as leave to send the
// request again.
type ResettingHTTP2 struct {
	// GoAway, set before the first request, answers with GOAWAY (last
	// stream 0) and closes the connection instead of resetting the stream.
	GoAway bool
	// TLS, set before Start, serves HTTP/2 over TLS (its NextProtos
	// should offer "h2"); URL is then https://host:port.
	TLS *tls.Config
	// URL is http://host:port.
	URL     string
	ln      net.Listener
	effects atomic.Int32
	// OnEffect, when set before the first request, is called with the
	// count after each effect.
	OnEffect func(n int32)
}

// NewResettingHTTP2 listens on a loopback port; Close stops it.
func NewResettingHTTP2() (*ResettingHTTP2, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &ResettingHTTP2{URL: "http://" + ln.Addr().String(), ln: ln}
	return s, nil
}

// Start accepts connections until Close.
func (s *ResettingHTTP2) Start() {
	if s.TLS != nil {
		s.URL = "https://" + s.ln.Addr().String()
	}
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

// Effects is how many requests the server has read.
func (s *ResettingHTTP2) Effects() int32 { return s.effects.Load() }

// Close stops listening.
func (s *ResettingHTTP2) Close() error { return s.ln.Close() }

func (s *ResettingHTTP2) serve(c net.Conn) {
	if s.TLS != nil {
		c = tls.Server(c, s.TLS)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	preface := make([]byte, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	if _, err := io.ReadFull(br, preface); err != nil {
		return
	}
	frame := func(typ, flags byte, stream uint32, payload []byte) {
		h := make([]byte, 9, 9+len(payload))
		h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
		h[3], h[4] = typ, flags
		binary.BigEndian.PutUint32(h[5:], stream)
		_, _ = c.Write(append(h, payload...))
	}
	const (
		typeHeaders  = 0x1
		typeRST      = 0x3
		typeSettings = 0x4
		typeGoAway   = 0x7
		flagAck      = 0x1
	)
	frame(typeSettings, 0, 0, nil)
	head := make([]byte, 9)
	for {
		if _, err := io.ReadFull(br, head); err != nil {
			return
		}
		length := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		if _, err := io.CopyN(io.Discard, br, int64(length)); err != nil {
			return
		}
		stream := binary.BigEndian.Uint32(head[5:]) & 0x7fffffff
		switch head[3] {
		case typeSettings:
			if head[4]&flagAck == 0 {
				frame(typeSettings, flagAck, 0, nil)
			}
		case typeHeaders:
			n := s.effects.Add(1)
			if s.OnEffect != nil {
				s.OnEffect(n)
			}
			if s.GoAway {
				frame(typeGoAway, 0, 0, make([]byte, 8)) // last stream 0, NO_ERROR
				return
			}
			frame(typeRST, 0, stream, []byte{0, 0, 0, 1}) // PROTOCOL_ERROR
		}
	}
}

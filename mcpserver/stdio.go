package mcpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultStdioDrain bounds how long StdioTransport waits, at the end of its
// input, for the answers of requests it has read.
const DefaultStdioDrain = time.Minute

// StdioTransport is the SDK's mcp.IOTransport (newline-delimited JSON on a
// reader and a writer) that answers every request it has read before it
// reports the end of its input. The SDK's connection shuts down as soon as
// its reader ends: it cancels the requests still running and writes no
// answer after that, so requests piped in with their stdin closed behind
// them were dropped. This transport holds the end of input back until
// every request read has been answered, or Drain has passed (then the
// requests still running are cancelled, unanswered, as before).
type StdioTransport struct {
	Reader io.ReadCloser
	Writer io.WriteCloser
	// Drain bounds the wait at the end of input (DefaultStdioDrain when 0).
	Drain time.Duration
	// Logger is told about requests left unanswered; none when nil.
	Logger *slog.Logger
}

var _ mcp.Transport = (*StdioTransport)(nil)

// Connect implements mcp.Transport.
func (t *StdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	inner, err := (&mcp.IOTransport{Reader: t.Reader, Writer: t.Writer}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	drain := t.Drain
	if drain == 0 {
		drain = DefaultStdioDrain
	}
	logger := t.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &drainingConn{Connection: inner, drain: drain, logger: logger, unanswered: map[jsonrpc.ID]int{}, closed: make(chan struct{})}, nil
}

// drainingConn counts the requests read and not yet answered, and holds the
// end of input back while there are any.
type drainingConn struct {
	mcp.Connection
	drain  time.Duration
	logger *slog.Logger

	mu         sync.Mutex
	unanswered map[jsonrpc.ID]int // requests read, by id, not yet answered
	answered   chan struct{}      // closed when unanswered empties, while Read waits for it

	closeOnce sync.Once
	closed    chan struct{}
}

// Read implements mcp.Connection.
func (c *drainingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
			c.mu.Lock()
			c.unanswered[req.ID]++
			c.mu.Unlock()
		}
		return msg, nil
	}
	if !errors.Is(err, io.EOF) {
		return nil, err
	}
	c.mu.Lock()
	if len(c.unanswered) == 0 {
		c.mu.Unlock()
		return nil, err
	}
	c.answered = make(chan struct{})
	answered := c.answered
	c.mu.Unlock()
	timer := time.NewTimer(c.drain)
	defer timer.Stop()
	select {
	case <-answered:
	case <-timer.C:
		c.mu.Lock()
		n := len(c.unanswered)
		c.mu.Unlock()
		c.logger.Warn("end of input: requests still unanswered after the drain bound are cancelled", "unanswered", n, "drain", c.drain.String())
	case <-c.closed:
	case <-ctx.Done():
	}
	return nil, err
}

// Write implements mcp.Connection.
func (c *drainingConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		if c.unanswered[resp.ID]--; c.unanswered[resp.ID] <= 0 {
			delete(c.unanswered, resp.ID)
		}
		if len(c.unanswered) == 0 && c.answered != nil {
			close(c.answered)
			c.answered = nil
		}
		c.mu.Unlock()
	}
	return err
}

// Close implements mcp.Connection.
func (c *drainingConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Connection.Close()
}

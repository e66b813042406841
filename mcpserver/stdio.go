package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
//
// A line that is not a JSON-RPC message is answered, and the bridge goes
// on (SPEC §10.2): invalid JSON with -32700 (parse error), JSON that is no
// JSON-RPC message with -32600 (invalid request), a line past the SDK's
// line limit with -32700, each with id null. The SDK's own reader would
// end the connection there, leaving the requests already read unanswered.
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
	// The SDK reads only the lines that are messages; the others are
	// answered here, on the same writer, one whole line per Write.
	w := &lineWriter{WriteCloser: t.Writer}
	pr, pw := io.Pipe()
	go filterLines(t.Reader, pw, w)
	inner, err := (&mcp.IOTransport{Reader: closeBoth{pr, t.Reader}, Writer: w}).Connect(ctx)
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

// methodListen is the request that opens a client's stream of
// notifications (SEP-2575): the SDK answers it only when the session ends,
// so the end of input never waits for it.
const methodListen = "subscriptions/listen"

// drainingConn counts the requests read and not yet answered (but the
// listen stream), and holds the end of input back while there are any.
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
		if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && req.Method != methodListen {
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

// maxLine bounds a line of input, as the SDK's reader does.
const maxLine = mcp.DefaultMaxLineLength

// filterLines copies the lines of in that are JSON-RPC messages (or
// batches of them) to out, and answers every other line on w, until in
// ends; then it closes out.
func filterLines(in io.Reader, out *io.PipeWriter, w *lineWriter) {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(r)
		if len(bytes.TrimSpace(line)) > 0 || tooLong {
			if code, why := lineProblem(line, tooLong); code != 0 {
				if werr := w.answer(code, why); werr != nil {
					out.CloseWithError(werr)
					return
				}
			} else if _, werr := out.Write(append(liftLine(line), '\n')); werr != nil {
				return // the connection is closed
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			out.CloseWithError(err)
			return
		}
	}
}

// liftLine moves a tools/call's params.idempotencyKey into _meta, as
// HTTPHandler does (liftParamsKey).
func liftLine(line []byte) []byte {
	if !bytes.Contains(line, []byte(`"idempotencyKey"`)) {
		return line
	}
	return liftKeys(line)
}

// readLine reads one line of r without its newline, at most maxLine bytes
// of it kept: tooLong says the rest was dropped.
func readLine(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > maxLine {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), tooLong, err
	}
}

// lineProblem is the JSON-RPC error code of a line that is no message, and
// why; 0 for a message or a batch of them.
func lineProblem(line []byte, tooLong bool) (int64, string) {
	switch {
	case tooLong:
		return jsonrpc.CodeParseError, fmt.Sprintf("Parse error: the line is longer than %d bytes", maxLine)
	case !json.Valid(line):
		return jsonrpc.CodeParseError, "Parse error: the line is not valid JSON"
	}
	var batch []json.RawMessage
	if json.Unmarshal(line, &batch) == nil {
		if len(batch) == 0 {
			return jsonrpc.CodeInvalidRequest, "Invalid Request: an empty batch"
		}
		for _, m := range batch {
			if _, err := jsonrpc.DecodeMessage(m); err != nil {
				return jsonrpc.CodeInvalidRequest, "Invalid Request: a message of the batch is not JSON-RPC 2.0"
			}
		}
		return 0, ""
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		return jsonrpc.CodeInvalidRequest, "Invalid Request: the line is not a JSON-RPC 2.0 message"
	}
	return 0, ""
}

// lineWriter writes whole lines: the SDK's messages (one Write each) and
// the answers of filterLines, never interleaved.
type lineWriter struct {
	io.WriteCloser
	mu sync.Mutex
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.WriteCloser.Write(p)
}

// answer writes the error response of a line that is no message.
func (w *lineWriter) answer(code int64, message string) error {
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": message}})
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// closeBoth reads the filtered pipe and closes the input beneath it too.
type closeBoth struct {
	*io.PipeReader
	in io.Closer
}

func (c closeBoth) Close() error {
	c.PipeReader.Close()
	return c.in.Close()
}

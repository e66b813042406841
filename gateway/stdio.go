package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioTransport spawns the upstream and speaks MCP over its stdin and
// stdout (newline-delimited JSON, the SDK's own framing), as
// mcp.CommandTransport does, and also records, for a call's messages,
// whether any byte of them was written to the process's stdin: a write
// that fails before writing a byte (EPIPE: no process holds the pipe's
// read end any more, it has exited) sent nothing, so the call is
// not dispatched and its key stays free.
//
// The process's exit alone proves nothing: a launcher may exit and leave
// the pipe to the server it started, which reads on. So the gateway
// writes, and the pipe says whether anyone could read.
type stdioTransport struct {
	cmd       *exec.Cmd
	terminate time.Duration // how long Close waits after closing stdin before SIGTERM, then before SIGKILL
	maxLine   int64         // the longest line read that answers no tools/list (one message)
	// attribute, when set, tags a message the upstream sends for a tool
	// call's client with its call (Upstream.attribute); nil for others.
	attribute func(line []byte) []byte
	// over is set once the process wrote a line longer than its bound:
	// the session ends (the framing is lost), and a call it held ran.
	over atomic.Bool

	mu    sync.Mutex
	lists map[string]*dispatch // tools/list requests awaiting their answer, by id
}

// awaitList notes a tools/list request whose answer d edits and bounds.
func (t *stdioTransport) awaitList(id jsonrpc.ID, d *dispatch) {
	raw, err := json.Marshal(id.Raw())
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lists == nil {
		t.lists = map[string]*dispatch{}
	}
	t.lists[string(raw)] = d
}

// bound is the longest line read now: maxLine, or more while a
// tools/list page may be on its way.
func (t *stdioTransport) bound() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.maxLine
	for _, d := range t.lists {
		b = max(b, d.limit)
	}
	return b
}

// listAnswer is the dispatch of the tools/list that line answers, nil
// when it answers none.
func (t *stdioTransport) listAnswer(line []byte) *dispatch {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lists) == 0 {
		return nil
	}
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil {
		return nil
	}
	var key bytes.Buffer
	if json.Compact(&key, m.ID) != nil {
		return nil
	}
	d := t.lists[key.String()]
	delete(t.lists, key.String())
	return d
}

func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	t.cmd.Stdin, t.cmd.Stdout = inR, outW
	err = t.cmd.Start()
	// The child's ends are the child's: held here too, the stdin pipe
	// would never break and stdout never end.
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	p := &process{cmd: t.cmd, stdin: inW, stdout: outR, exited: make(chan struct{}), terminate: t.terminate}
	go func() {
		p.waitErr = t.cmd.Wait()
		close(p.exited)
	}()
	// The lines are bounded (and tools/list pages edited) here; the SDK's
	// own bound is kept above every bound of ours.
	inner, err := (&mcp.IOTransport{Reader: io.NopCloser(&lineReader{t: t, br: bufio.NewReaderSize(outR, 64<<10)}), Writer: p,
		MaxLineLength: int(max(t.maxLine, MaxToolListBytes)) + 64<<10}).Connect(ctx)
	if err != nil {
		p.Close()
		return nil, err
	}
	return &stdioConn{Connection: inner, p: p, t: t}, nil
}

// stdioConn is the SDK's connection over the process's pipes; a write
// made for a call (its context carries a *dispatch) marks the call sent
// when any byte of it went to the pipe.
type stdioConn struct {
	mcp.Connection
	p  *process
	t  *stdioTransport
	mu sync.Mutex // one write at a time, so p.wrote is that write's
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p.wrote = false
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/list" {
		if d := dispatchOf(ctx); d != nil && d.list != nil {
			c.t.awaitList(req.ID, d)
		}
	}
	err := c.Connection.Write(ctx, msg)
	if d, ok := ctx.Value(dispatchKey{}).(*dispatch); ok && c.p.wrote {
		d.wrote.Store(true)
	}
	return err
}

// process is the spawned upstream: its stdin (the connection's writer)
// and how it is stopped.
type process struct {
	cmd       *exec.Cmd
	stdin     *os.File
	stdout    *os.File
	exited    chan struct{} // closed once Wait returned
	waitErr   error
	terminate time.Duration

	wrote bool // a byte of the current write (stdioConn.mu) may have gone
	once  sync.Once
	err   error
}

// Write writes to the process's stdin. A pipe write either writes bytes
// or fails having written none, so n == 0 with an error is a write that
// reached nobody.
func (p *process) Write(b []byte) (int, error) {
	n, err := p.stdin.Write(b)
	if n > 0 || err == nil {
		p.wrote = true
	}
	if err != nil && n == 0 {
		return 0, fmt.Errorf("%w: %w", errNotWritten, err)
	}
	return n, err
}

// errNotWritten marks a write to the spawned upstream that wrote nothing.
var errNotWritten = errors.New("nothing was written to the upstream's stdin")

// Close ends the process as the MCP stdio transport says: close its
// stdin, wait for it to exit, then SIGTERM, then SIGKILL.
func (p *process) Close() error {
	p.once.Do(func() {
		p.stdin.Close()
		defer p.stdout.Close() // unblocks a read a leftover child's pipe would hold
		wait := func() bool {
			select {
			case <-p.exited:
				return true
			case <-time.After(p.terminate):
				return false
			}
		}
		if wait() {
			p.err = p.exitErr()
			return
		}
		if p.cmd.Process.Signal(syscall.SIGTERM) == nil && wait() {
			p.err = p.exitErr()
			return
		}
		p.cmd.Process.Kill()
		if !wait() {
			p.err = errors.New("the upstream process did not exit after SIGKILL")
			return
		}
		p.err = p.exitErr()
	})
	return p.err
}

func (p *process) exitErr() error {
	var exit *exec.ExitError
	if errors.As(p.waitErr, &exit) {
		return nil // its exit status is its own business once it is stopped
	}
	return p.waitErr
}

// lineReader hands the SDK the process's output a whole line at a time,
// each at most the transport's bound: a longer line fails the session
// (over), as nothing after it can be framed. A line answering a
// tools/list is counted, bounded by and edited for its listing, as the
// HTTP transport does with a page.
type lineReader struct {
	t       *stdioTransport
	br      *bufio.Reader
	line    bytes.Buffer
	pending []byte
}

// errLineTooLong ends a spawned upstream's session on a line over the
// bound.
var errLineTooLong = errors.New("the upstream wrote a line longer than the gateway reads")

func (l *lineReader) Read(p []byte) (int, error) {
	for len(l.pending) == 0 {
		if err := l.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, l.pending)
	l.pending = l.pending[n:]
	return n, nil
}

func (l *lineReader) next() error {
	l.line.Reset()
	bound := l.t.bound()
	for {
		chunk, err := l.br.ReadSlice('\n')
		if int64(l.line.Len()+len(chunk)) > bound {
			bound = l.t.bound() // a tools/list sent since may allow more
		}
		if int64(l.line.Len()+len(chunk)) > bound {
			l.t.over.Store(true)
			return fmt.Errorf("%w (%d bytes)", errLineTooLong, bound)
		}
		l.line.Write(chunk)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if l.line.Len() > 0 {
				break // the last line, without its newline
			}
			return err
		}
		break
	}
	line := l.line.Bytes()
	if d := l.t.listAnswer(line); d != nil {
		d.read.Add(int64(len(line)))
		if int64(len(line)) > d.limit {
			d.over.Store(true)
		}
		l.pending = append(d.list.edit(bytes.TrimRight(line, "\r\n")), '\n')
		return nil
	}
	if int64(len(line)) > l.t.maxLine {
		l.t.over.Store(true)
		return fmt.Errorf("%w (%d bytes)", errLineTooLong, l.t.maxLine)
	}
	if l.t.attribute != nil {
		if out := l.t.attribute(bytes.TrimRight(line, "\r\n")); out != nil {
			line = append(out, '\n')
		}
	}
	l.pending = line
	return nil
}

package gateway

import (
	"context"
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
	maxLine   int64         // the longest line read (one message); the SDK's default when 0
	// over is set once the process wrote a line longer than maxLine: the
	// session ends (the framing is lost), and a call it held ran.
	over atomic.Bool
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
	inner, err := (&mcp.IOTransport{Reader: io.NopCloser(&lineBound{r: outR, limit: t.maxLine, over: &t.over}), Writer: p,
		MaxLineLength: int(t.maxLine)}).Connect(ctx)
	if err != nil {
		p.Close()
		return nil, err
	}
	return &stdioConn{Connection: inner, p: p}, nil
}

// stdioConn is the SDK's connection over the process's pipes; a write
// made for a call (its context carries a *dispatch) marks the call sent
// when any byte of it went to the pipe.
type stdioConn struct {
	mcp.Connection
	p  *process
	mu sync.Mutex // one write at a time, so p.wrote is that write's
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p.wrote = false
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

// lineBound passes the process's output through and notes (over) a line
// longer than limit; the SDK's reader, bounded to the same limit, ends
// the session there.
type lineBound struct {
	r     io.Reader
	limit int64
	over  *atomic.Bool
	n     int64 // bytes of the current line
}

func (l *lineBound) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if l.limit <= 0 {
		return n, err
	}
	for _, b := range p[:n] {
		if b == '\n' {
			l.n = 0
			continue
		}
		// The SDK's reader, bounded to limit, fails once it holds limit
		// bytes of one line.
		if l.n++; l.n >= l.limit {
			l.over.Store(true)
		}
	}
	return n, err
}

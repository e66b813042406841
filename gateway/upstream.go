package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
)

// UpstreamConfig says how to reach the upstream MCP server: over
// streamable HTTP at URL, or by spawning Command and speaking MCP over its
// stdin and stdout. Exactly one of URL and Command is set.
type UpstreamConfig struct {
	// URL is the upstream's streamable HTTP endpoint
	// (http://127.0.0.1:3001/mcp).
	URL string
	// Header is sent with every HTTP request to URL (the upstream's own
	// credentials, --upstream-header).
	Header http.Header
	// Command is the program to spawn and its arguments.
	Command []string
	// Env is the spawned program's whole environment; the gateway's own
	// when nil.
	Env []string
	// ConnectTimeout bounds connecting and the MCP handshake
	// (DefaultConnectTimeout when 0).
	ConnectTimeout time.Duration
	// OnToolsChanged is called (on its own goroutine) when the upstream
	// sends notifications/tools/list_changed.
	OnToolsChanged func()
	// Logger receives the connection's events; none when nil.
	Logger *slog.Logger
	// Version names the gateway in the MCP handshake.
	Version string
}

// DefaultConnectTimeout bounds a connection to the upstream and its
// handshake.
const DefaultConnectTimeout = 15 * time.Second

// Upstream is the gateway's MCP client session with the upstream server,
// made again when it is lost: a spawned server that exited is spawned
// anew, an HTTP session the server forgot is opened anew, each before a
// call is sent, never by sending a call twice.
type Upstream struct {
	cfg    UpstreamConfig
	client *mcp.Client
	log    *slog.Logger

	mu      sync.Mutex
	session *mcp.ClientSession // nil until connected, and once lost
	closed  bool

	relay relay // notifications passed on (notify.go)
}

// Dial connects to the upstream and checks the handshake.
func Dial(ctx context.Context, cfg UpstreamConfig) (*Upstream, error) {
	if (cfg.URL == "") == (len(cfg.Command) == 0) {
		return nil, errors.New("gateway: give the upstream as a URL or as a command, one of them")
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	u := &Upstream{cfg: cfg, log: cfg.Logger}
	if u.log == nil {
		u.log = slog.New(slog.DiscardHandler)
	}
	opts := &mcp.ClientOptions{}
	u.relayTo(opts)
	if cfg.OnToolsChanged != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { go cfg.OnToolsChanged() }
	}
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	u.client = mcp.NewClient(&mcp.Implementation{Name: "idem-gateway", Version: version}, opts)
	if _, err := u.current(ctx); err != nil {
		return nil, err
	}
	return u, nil
}

// Describe names the upstream for logs.
func (u *Upstream) Describe() string {
	if u.cfg.URL != "" {
		return u.cfg.URL
	}
	return fmt.Sprint(u.cfg.Command)
}

// current returns the live session, connecting first when there is none.
// A failure to connect is idem.NotDispatched: no call was sent.
func (u *Upstream) current(ctx context.Context) (*mcp.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, unavailable(errors.New("the gateway's upstream connection is closed"))
	}
	if u.session != nil {
		return u.session, nil
	}
	cctx, cancel := context.WithTimeout(ctx, u.cfg.ConnectTimeout)
	defer cancel()
	cs, err := u.client.Connect(cctx, u.transport(), nil)
	if err != nil {
		return nil, unavailable(fmt.Errorf("connect to the upstream MCP server %s: %w", u.Describe(), err))
	}
	u.session = cs
	go func() {
		// A spawned server that exits, or a connection that fails for good,
		// ends the session: the next call connects again.
		err := cs.Wait()
		u.forget(cs)
		u.log.Warn("the upstream MCP session ended; the next call connects again", "upstream", u.Describe(), "error", err)
	}()
	return cs, nil
}

// forget drops cs if it is the current session.
func (u *Upstream) forget(cs *mcp.ClientSession) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session == cs {
		u.session = nil
	}
}

func (u *Upstream) transport() mcp.Transport {
	if u.cfg.URL != "" {
		return &mcp.StreamableClientTransport{
			Endpoint:   u.cfg.URL,
			HTTPClient: &http.Client{Transport: &tracked{header: u.cfg.Header, next: http.DefaultTransport}},
			MaxRetries: 2,
		}
	}
	cmd := exec.Command(u.cfg.Command[0], u.cfg.Command[1:]...)
	cmd.Env = u.cfg.Env
	cmd.Stderr = os.Stderr // the upstream's own logs, beside the gateway's
	return &stdioTransport{cmd: cmd, terminate: 2 * time.Second}
}

// Tools lists every tool of the upstream, all pages.
func (u *Upstream) Tools(ctx context.Context) ([]*mcp.Tool, error) {
	cs, err := u.current(ctx)
	if err != nil {
		return nil, err
	}
	var out []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			if errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, errNotWritten) {
				u.forget(cs)
				if u.cfg.URL == "" {
					go cs.Close()
				}
			}
			return nil, fmt.Errorf("tools/list on the upstream %s: %w", u.Describe(), err)
		}
		out = append(out, t)
	}
	return out, nil
}

// Call sends one tools/call. Its error is idem.NotDispatched when the call
// certainly did not reach the upstream (no session could be made; the
// HTTP request failed before any byte of it was written, or the upstream
// refused it for a session it no longer knows, before running anything;
// or no byte of it was written to a spawned upstream's stdin, because the
// session had already ended or the pipe was broken: the process had
// exited); any other error may have followed an effect. A spawned
// upstream found dead so is spawned anew for the next call.
func (u *Upstream) Call(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	for try := 0; ; try++ {
		cs, err := u.current(ctx)
		if err != nil {
			return nil, err
		}
		sent := &dispatch{}
		res, err := cs.CallTool(context.WithValue(ctx, dispatchKey{}, sent), params)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if u.cfg.URL != "" && errors.Is(err, mcp.ErrSessionMissing) {
			// The upstream answered 404 for the session (it restarted):
			// it ran nothing. Open a session and send the call once more.
			u.forget(cs)
			cs.Close()
			if try == 0 {
				continue
			}
			return nil, unavailable(err)
		}
		if !sent.wrote.Load() {
			// Not a byte of it went out: over HTTP, no request was
			// written; over stdio, the session had ended or the pipe was
			// broken before the write (the process died between two
			// calls, before its session's end was seen).
			u.forget(cs)
			if u.cfg.URL == "" {
				go cs.Close() // stop what is left of the process; the next call spawns anew
			}
			return nil, unavailable(err)
		}
		if errors.Is(err, mcp.ErrConnectionClosed) {
			u.forget(cs)
		}
		return nil, err
	}
}

// Close ends the session (a spawned server is stopped).
func (u *Upstream) Close() error {
	u.mu.Lock()
	cs := u.session
	u.session, u.closed = nil, true
	u.mu.Unlock()
	if cs != nil {
		return cs.Close()
	}
	return nil
}

// dispatch records whether any of a call was written: its HTTP request
// (tracked), or a byte of it to a spawned upstream's stdin (stdioConn).
type dispatch struct{ wrote atomic.Bool }

type dispatchKey struct{}

// tracked is the HTTP upstream's transport: it adds the configured headers
// and records, for a call's requests, whether any was written (SDK
// requests carry the call's context).
type tracked struct {
	header http.Header
	next   http.RoundTripper
}

func (t *tracked) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for name, values := range t.header {
		r.Header[http.CanonicalHeaderKey(name)] = values
	}
	if d, ok := r.Context().Value(dispatchKey{}).(*dispatch); ok {
		trace := &httptrace.ClientTrace{WroteHeaders: func() { d.wrote.Store(true) }}
		r = r.WithContext(httptrace.WithClientTrace(r.Context(), trace))
	}
	return t.next.RoundTrip(r)
}

// unavailable is the error of a call that never reached the upstream: 503
// UPSTREAM_UNAVAILABLE, retryable, and (NotDispatched) the key stays free.
func unavailable(err error) error {
	return idem.NotDispatched(idem.Errorf(idem.CodeUpstreamUnavailable,
		"the upstream MCP server could not be reached, so the call was not sent (%v); nothing ran and the key is free: send the same call again later", err))
}

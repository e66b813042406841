package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// UpstreamConfig says how to reach the upstream MCP server: over
// streamable HTTP at URL, or by spawning Command and speaking MCP over its
// stdin and stdout. Exactly one of URL and Command is set.
type UpstreamConfig struct {
	// Name names the upstream in every call's fingerprint (SPEC §6.2), so
	// that gateways in front of different servers on one store never
	// answer each other's keys. When empty, the upstream's Target says
	// what names it.
	Name string
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
	// OnListChanged is called with the method when the upstream sends
	// notifications/resources/list_changed or prompts/list_changed.
	OnListChanged func(method string)
	// Logger receives the connection's events; none when nil.
	Logger *slog.Logger
	// Version names the gateway in the MCP handshake.
	Version string
	// MaxResultBytes bounds what is read of one upstream answer before it
	// is held whole: a JSON body, one SSE event, one stdio line
	// (DefaultMaxResultBytes when 0). A tool result over it is an error
	// of a call that ran.
	MaxResultBytes int64
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
	stdio   *stdioTransport    // stdioOf's transport, when the upstream is spawned
	stdioOf *mcp.ClientSession
	closed  bool

	poolOnce sync.Once
	pool     *http.Transport

	relay relay         // notifications passed on (notify.go)
	subs  subscriptions // resources its clients subscribed to (resources.go)

	rejoining  atomic.Bool   // a rejoin runs
	rejoinedAt time.Time     // when the last rejoin made a session (mu)
	rejoinWait time.Duration // what it waited first (mu)
	done       chan struct{} // closed by Close
}

// Dial connects to the upstream and checks the handshake.
func Dial(ctx context.Context, cfg UpstreamConfig) (*Upstream, error) {
	if (cfg.URL == "") == (len(cfg.Command) == 0) {
		return nil, errors.New("gateway: give the upstream as a URL or as a command, one of them")
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = DefaultMaxResultBytes
	}
	u := &Upstream{cfg: cfg, log: cfg.Logger, done: make(chan struct{})}
	if u.log == nil {
		u.log = slog.New(slog.DiscardHandler)
	}
	opts := &mcp.ClientOptions{}
	u.relayTo(opts)
	u.relayPeers(opts)
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

// Target is what names the upstream in its tools' fingerprints
// (idem.RawSpec.Target): "mcp:" and the configured Name; else the URL as
// idem.TargetOf spells it (scheme, host, port, path); else "stdio:" and
// the command line, its words joined by spaces (another command line, an
// upgrade's new version in it too, is another upstream).
func (u *Upstream) Target() string { return u.cfg.target() }

func (c UpstreamConfig) target() string {
	switch {
	case c.Name != "":
		return "mcp:" + c.Name
	case c.URL != "":
		if parsed, err := url.Parse(c.URL); err == nil {
			return idem.TargetOf(parsed)
		}
		return c.URL
	}
	return "stdio:" + strings.Join(c.Command, " ")
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
	t := u.transport()
	cs, err := u.client.Connect(cctx, t, nil)
	if err != nil {
		return nil, unavailable(fmt.Errorf("connect to the upstream MCP server %s: %w", u.Describe(), err))
	}
	if caps := cs.InitializeResult().Capabilities; caps != nil && caps.Logging != nil {
		// Every level, once: each call's client gets what its own
		// logging/setLevel asks for (mcpserver.Peer.Log), and no client's
		// level changes what another receives.
		if err := cs.SetLoggingLevel(cctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			u.log.Debug("logging/setLevel on the upstream failed: its log messages may not come", "upstream", u.Describe(), "error", err)
		}
	}
	u.session = cs
	u.stdio, _ = t.(*stdioTransport)
	u.stdioOf = cs
	go u.resubscribe(cs)
	go func() {
		// A spawned server that exits, or a connection that fails for good,
		// ends the session: the next call connects again.
		err := cs.Wait()
		u.forget(cs)
		u.log.Warn("the upstream MCP session ended; the next call connects again", "upstream", u.Describe(), "error", err)
		u.rejoin()
	}()
	return cs, nil
}

// rejoin makes a new session while the gateway's clients hold
// subscriptions: their resources/updated come on a session, and without
// one none would come until a request made it. Without subscriptions the
// next request makes it, as before. The first try is at once, unless the
// last rejoin was less than rejoinQuiet ago (an upstream that drops each
// session it accepts): then, as after each failed try, it waits, 1 s
// doubling to 30 s. One rejoin runs at a time; Close ends it.
func (u *Upstream) rejoin() {
	if !u.rejoining.CompareAndSwap(false, true) {
		return
	}
	defer u.rejoining.Store(false)
	u.mu.Lock()
	wait := time.Duration(0)
	if time.Since(u.rejoinedAt) < rejoinQuiet {
		wait = min(max(2*u.rejoinWait, time.Second), 30*time.Second)
	}
	u.mu.Unlock()
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-u.done:
				t.Stop()
				return
			case <-t.C:
			}
		}
		u.mu.Lock()
		done := u.closed || u.session != nil
		u.mu.Unlock()
		if done || !u.subs.held() {
			return
		}
		_, err := u.current(context.Background())
		if err == nil {
			u.mu.Lock()
			u.rejoinedAt, u.rejoinWait = time.Now(), wait
			u.mu.Unlock()
			return
		}
		wait = min(max(2*wait, time.Second), 30*time.Second)
		u.log.Warn("the upstream could not be reached to carry its clients' subscriptions: trying again", "upstream", u.Describe(), "in", wait.String(), "error", err.Error())
	}
}

// rejoinQuiet is how long after a rejoin the next one waits first.
const rejoinQuiet = 30 * time.Second

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
			HTTPClient: &http.Client{Transport: &tracked{header: u.cfg.Header, next: u.httpTransport(), limit: u.cfg.MaxResultBytes}},
			MaxRetries: 2,
			// tracked bounds an event first (a call's answer, a listing's
			// page); this is the SDK's own cap, kept above both.
			MaxEventSize: int(max(u.cfg.MaxResultBytes, MaxToolListBytes)) + 64<<10,
		}
	}
	cmd := exec.Command(u.cfg.Command[0], u.cfg.Command[1:]...)
	cmd.Env = u.cfg.Env
	cmd.Stderr = os.Stderr // the upstream's own logs, beside the gateway's
	return &stdioTransport{cmd: cmd, terminate: 2 * time.Second, maxLine: u.cfg.MaxResultBytes, attribute: u.attribute}
}

// httpTransport is the upstream's own connection pool (not
// http.DefaultTransport, which others may tune), made once.
func (u *Upstream) httpTransport() http.RoundTripper {
	u.poolOnce.Do(func() {
		// idem proxy's pool: 64 idle connections per host (every call is an
		// exchange with the one upstream host; http.DefaultTransport keeps
		// 2, and most calls dialled anew, issue 34), and a request refused,
		// not written, on a connection the upstream has closed
		// (internal/keptconn).
		u.pool = proxy.NewClient().Transport.(*http.Transport)
	})
	return u.pool
}

// Tools lists every tool of the upstream, all pages, within the bounds
// (MaxTools, MaxToolPages, MaxToolListBytes); a tool left out (nested
// deeper than MaxToolDepth) is logged. See ListTools.
func (u *Upstream) Tools(ctx context.Context) ([]*mcp.Tool, error) {
	tools, warnings, err := u.ListTools(ctx)
	for _, w := range warnings {
		u.log.Warn("gateway", "upstream", u.Describe(), "warning", w)
	}
	return tools, err
}

// ListTools lists every tool of the upstream, all pages, and says which
// it left out and why. A listing past a bound is an error naming it: a
// hostile upstream that pages forever or lists without end is refused,
// not followed. A session the upstream no longer knows is made anew, and
// the listing begun again once.
func (u *Upstream) ListTools(ctx context.Context) ([]*mcp.Tool, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, MaxToolListDuration)
	defer cancel()
	for try := 0; ; try++ {
		cs, err := u.current(ctx)
		if err != nil {
			return nil, nil, err
		}
		tools, warnings, gone, err := u.list(ctx, cs)
		if err == nil {
			return tools, warnings, nil
		}
		if gone || errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, errNotWritten) {
			u.drop(cs)
			if gone && try == 0 {
				continue
			}
		}
		return nil, nil, fmt.Errorf("tools/list on the upstream %s: %w", u.Describe(), err)
	}
}

// list reads the pages of tools/list on cs; gone says the upstream
// refused a page for the session.
func (u *Upstream) list(ctx context.Context, cs *mcp.ClientSession) (tools []*mcp.Tool, warnings []string, gone bool, err error) {
	budget := int64(MaxToolListBytes)
	cursors := map[string]bool{}
	cursor := ""
	for page := 1; ; page++ {
		if page > MaxToolPages {
			return nil, nil, false, tooMuch("pages", MaxToolPages)
		}
		d := &dispatch{limit: budget, list: &listPage{room: MaxTools - len(tools)}}
		res, err := cs.ListTools(context.WithValue(ctx, dispatchKey{}, d), &mcp.ListToolsParams{Cursor: cursor})
		budget -= d.read.Load()
		if d.over.Load() || budget < 0 {
			return nil, nil, false, tooMuch("bytes", MaxToolListBytes)
		}
		if d.list.tooMany || (err == nil && len(tools)+len(res.Tools) > MaxTools) {
			return nil, nil, false, tooMuch("tools", MaxTools)
		}
		for _, name := range d.list.skipped {
			warnings = append(warnings, fmt.Sprintf("tool %q is not served: its description nests deeper than %d levels", name, MaxToolDepth))
		}
		if err != nil {
			return nil, nil, d.sessionGone(), err
		}
		tools = append(tools, res.Tools...)
		if res.NextCursor == "" {
			return tools, warnings, false, nil
		}
		if cursors[res.NextCursor] {
			return nil, nil, false, fmt.Errorf("the upstream's tools/list gave the cursor %.64q twice (page %d): it pages in a circle", res.NextCursor, page)
		}
		cursors[res.NextCursor] = true
		cursor = res.NextCursor
	}
}

// Call sends one tools/call. Its error is idem.NotDispatched when the call
// certainly did not reach the upstream (no session could be made; the
// HTTP request failed before any byte of it was written, or the upstream
// refused it for a session it no longer knows, before running anything;
// or no byte of it was written to a spawned upstream's stdin, because the
// session had already ended or the pipe was broken: the process had
// exited); any other error may have followed an effect. A spawned
// upstream found dead so is spawned anew for the next call. The call is
// written once: the only second sending is to a new session after the
// upstream refused the first for its session (it ran nothing). A call
// that was not sent because its kept-alive connection was closed (the
// upstream restarted, or its idle timeout passed) goes once more, on a
// new connection.
func (u *Upstream) Call(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	renewed, redialed := false, false
	for {
		cs, err := u.current(ctx)
		if err != nil {
			return nil, err
		}
		d := &dispatch{limit: u.cfg.MaxResultBytes}
		var leave func()
		token, _ := params.GetProgressToken().(string)
		d.call, leave = u.enter(ctx, token)
		if u.cfg.URL != "" {
			d.tail = make(chan struct{})
		}
		cctx, abort := context.WithCancelCause(ctx)
		d.abort = abort
		res, err := cs.CallTool(context.WithValue(cctx, dispatchKey{}, d), withLogLevel(cs, d.call, params))
		d.call.settle(ctx)
		leave()
		if err == nil && d.streamed.Load() {
			awaitTail(ctx, d.tail)
		}
		abort(nil)
		if d.over.Load() || (err != nil && u.stdioOver(cs)) {
			// The upstream answered: the call ran; what it said is not
			// read, so nothing can be stored.
			return nil, idem.Errorf(idem.CodeExecutionFailed, "the upstream's answer to tools/call %q exceeded %d bytes, the most the gateway reads of one answer: the call ran, but its result was not read or stored", params.Name, u.cfg.MaxResultBytes)
		}
		if err == nil {
			return res, nil
		}
		if refused := d.call.refusal(); refused != nil {
			return nil, idem.Errorf(idem.CodeExecutionFailed, "the upstream asked the caller of tools/call %q for input (MCP multi round-trip), and %v; the call was sent: it may have taken effect", params.Name, refused)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if u.cfg.URL != "" && (d.sessionGone() || (errors.Is(err, mcp.ErrSessionMissing) && !d.wrote.Load())) {
			// The upstream refused the call for its session (it restarted
			// and forgot it) before running anything: open a session and
			// send the call there, once.
			u.drop(cs)
			if !renewed {
				renewed = true
				continue
			}
			return nil, unavailable(err)
		}
		if !d.wrote.Load() && d.stale.Load() && !redialed {
			// The connection had been closed under it; the upstream's
			// other idle ones most likely were too.
			redialed = true
			u.pool.CloseIdleConnections()
			continue
		}
		if !d.wrote.Load() {
			// Not a byte of it went out: over HTTP, no request was
			// written; over stdio, the session had ended or the pipe was
			// broken before the write (the process died between two
			// calls, before its session's end was seen).
			u.drop(cs)
			return nil, unavailable(err)
		}
		if errors.Is(err, mcp.ErrConnectionClosed) {
			u.forget(cs)
		}
		return nil, err
	}
}

// awaitTail waits, at most streamTailHold, for a call's SSE stream to be
// read to its end after its answer (resumingStream): the next call then
// finds the connection in the pool. Past the bound the answer goes on
// and the end is read in the background.
func awaitTail(ctx context.Context, tail <-chan struct{}) {
	select {
	case <-tail:
		return
	default:
	}
	t := time.NewTimer(streamTailHold)
	defer t.Stop()
	select {
	case <-tail:
	case <-t.C:
	case <-ctx.Done():
	}
}

// stdioOver says whether cs is a spawned upstream's session that ended on
// a line over the bound.
func (u *Upstream) stdioOver(cs *mcp.ClientSession) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stdio != nil && u.stdioOf == cs && u.stdio.over.Load()
}

// drop forgets cs and closes it (a spawned process is stopped; an HTTP
// session is deleted, best effort) without waiting.
func (u *Upstream) drop(cs *mcp.ClientSession) {
	u.forget(cs)
	go cs.Close()
}

// Close ends the session (a spawned server is stopped) and the
// connections kept for it.
func (u *Upstream) Close() error {
	u.mu.Lock()
	cs := u.session
	if !u.closed {
		close(u.done)
	}
	u.session, u.closed = nil, true
	u.mu.Unlock()
	var err error
	if cs != nil {
		err = cs.Close()
	}
	if u.pool != nil {
		u.pool.CloseIdleConnections() // the upstream's own pool: nothing else uses it
	}
	return err
}

// unavailable is the error of a call that never reached the upstream: 503
// UPSTREAM_UNAVAILABLE, retryable, and (NotDispatched) the key stays free.
func unavailable(err error) error {
	return idem.NotDispatched(idem.Errorf(idem.CodeUpstreamUnavailable,
		"the upstream MCP server could not be reached, so the call was not sent (%v); nothing ran and the key is free: send the same call again later", err))
}

package mcpserver

import (
	"net/http"
	"sync"
	"time"

	"github.com/idem-run/idem"
)

// Default bounds on the MCP sessions one server holds (HTTPOptions). A
// session costs about 17 KiB and a goroutine while it lives, so without a
// bound one token could open sessions until the process ran out of memory
// (issue 28: 48,095 idle sessions in 40 s, 876 MiB).
const (
	DefaultSessionTimeout          = 5 * time.Minute
	DefaultMaxSessionsPerPrincipal = 64
	DefaultMaxSessions             = 2048
)

// sessionIDHeader carries a session's id (MCP streamable HTTP).
const sessionIDHeader = "Mcp-Session-Id"

// sessionBook counts the sessions the SDK holds, by principal, from what
// crosses the wire: a response that gives a request without a session id
// a new one opens a session; a DELETE of it, or no request on it for the
// idle timeout (the SDK's own SessionTimeout), ends it. A request that
// would open a session beyond a bound is answered 429 before the SDK sees
// it, so the SDK never holds more than the bounds.
type sessionBook struct {
	idle                    time.Duration
	maxPerPrincipal, maxAll int
	now                     func() time.Time

	mu       sync.Mutex
	sessions map[string]*bookedSession
	// byPrincipal counts sessions, and the openings admitted and not yet
	// answered, per principal.
	byPrincipal map[string]int
	opening     int // openings admitted, not yet answered
}

type bookedSession struct {
	principal string
	lastSeen  time.Time
}

func newSessionBook(idle time.Duration, perPrincipal, all int) *sessionBook {
	return &sessionBook{idle: idle, maxPerPrincipal: perPrincipal, maxAll: all, now: time.Now,
		sessions: map[string]*bookedSession{}, byPrincipal: map[string]int{}}
}

// sessionOwner names a principal as the SDK pins sessions to it.
func sessionOwner(p idem.Principal) string { return p.Org + "\x00" + p.ID }

// admit decides a request of p: one on a known session is seen (its idle
// time starts again); one that would open a session takes a place, or is
// refused with RATE_LIMITED when p or the server is at its bound. done
// must be called once, with the answer's header as the SDK wrote it.
func (b *sessionBook) admit(r *http.Request, p idem.Principal) (done func(w http.Header), err error) {
	who := sessionOwner(p)
	id := r.Header.Get(sessionIDHeader)
	b.mu.Lock()
	defer b.mu.Unlock()
	if id != "" {
		if s := b.sessions[id]; s != nil && s.principal == who {
			s.lastSeen = b.now()
			if r.Method == http.MethodDelete {
				return func(http.Header) { b.end(id) }, nil
			}
		}
		return func(http.Header) {}, nil
	}
	if r.Method != http.MethodPost {
		return func(http.Header) {}, nil // the SDK refuses it: no session to open
	}
	if b.full(who) {
		b.forgetIdle()
		if b.full(who) {
			return nil, b.refusal(who)
		}
	}
	b.byPrincipal[who]++
	b.opening++
	return func(h http.Header) { b.opened(who, h.Get(sessionIDHeader)) }, nil
}

func (b *sessionBook) full(who string) bool {
	return b.byPrincipal[who] >= b.maxPerPrincipal || len(b.sessions)+b.opening >= b.maxAll
}

func (b *sessionBook) refusal(who string) error {
	if b.byPrincipal[who] >= b.maxPerPrincipal {
		return idem.Errorf(idem.CodeRateLimited, "this principal holds %d MCP sessions, the most one may hold; end one (DELETE /mcp with its Mcp-Session-Id) or reuse an open one, or wait for an idle one to close (%s without a request)", b.byPrincipal[who], b.idle)
	}
	return idem.Errorf(idem.CodeRateLimited, "the server holds %d MCP sessions, the most it holds; retry after Retry-After, or reuse an open session", len(b.sessions)+b.opening)
}

// opened ends an admitted opening: the session id the SDK answered with
// is booked, or the place is given back when it opened none (a request
// that was no initialize, or failed).
func (b *sessionBook) opened(who, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.opening--
	if id == "" || b.sessions[id] != nil {
		b.byPrincipal[who]--
		b.tidy(who)
		return
	}
	b.sessions[id] = &bookedSession{principal: who, lastSeen: b.now()}
}

// end forgets a session its client ended.
func (b *sessionBook) end(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; s != nil {
		delete(b.sessions, id)
		b.byPrincipal[s.principal]--
		b.tidy(s.principal)
	}
}

// forgetIdle forgets the sessions without a request for the idle timeout:
// the SDK has closed them. It runs only when a bound is reached, so its
// cost (every booked session) is paid by the openings it makes room for.
func (b *sessionBook) forgetIdle() {
	cutoff := b.now().Add(-b.idle)
	for id, s := range b.sessions {
		if s.lastSeen.Before(cutoff) {
			delete(b.sessions, id)
			b.byPrincipal[s.principal]--
			b.tidy(s.principal)
		}
	}
}

func (b *sessionBook) tidy(who string) {
	if b.byPrincipal[who] <= 0 {
		delete(b.byPrincipal, who)
	}
}

// count is the number of sessions booked, and of those p holds.
func (b *sessionBook) count(p idem.Principal) (all, mine int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sessions), b.byPrincipal[sessionOwner(p)]
}

// headerWatcher tells the book the answer's header as soon as the SDK
// writes it (before the client can use a new session id), or when the SDK
// returns without writing.
type headerWatcher struct {
	http.ResponseWriter
	done func(http.Header)
	once sync.Once
}

func (w *headerWatcher) seen() { w.once.Do(func() { w.done(w.ResponseWriter.Header()) }) }

func (w *headerWatcher) WriteHeader(code int) {
	w.seen()
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerWatcher) Write(p []byte) (int, error) {
	w.seen()
	return w.ResponseWriter.Write(p)
}

// Flush passes on to the underlying writer, for event streams.
func (w *headerWatcher) Flush() {
	w.seen()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *headerWatcher) Unwrap() http.ResponseWriter { return w.ResponseWriter }

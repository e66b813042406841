// Package webui is idem's web console at /ui/: sign-in for human
// principals, the approvals inbox, the execution explorer, attempt lookup
// and the operations catalog. Pages are rendered on the server with
// html/template; styles and a few lines of script are embedded.
//
// The console calls the Runner in-process, so visibility, who may decide
// and self-approval are decided there, never here: the console shows the
// Runner's answers and errors. Sessions are kept in memory (docs/ui.md).
package webui

import (
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// Prefix is where the console is mounted.
const Prefix = "/ui/"

// Defaults for Config.
const (
	DefaultIdleTimeout     = 30 * time.Minute
	DefaultAbsoluteTimeout = 12 * time.Hour
)

// Config is what New needs.
type Config struct {
	Runner *pipeline.Runner
	// Auth resolves the token typed at sign-in; the API's authenticator.
	Auth idem.Authenticator
	// Clock tells the time for session expiry; idem.SystemClock when nil.
	Clock idem.Clock
	// IdleTimeout ends a session unused this long; AbsoluteTimeout ends
	// any session this long after sign-in.
	IdleTimeout     time.Duration
	AbsoluteTimeout time.Duration
	Logger          *slog.Logger
	// BasePath is the prefix the console's handler is mounted under with
	// http.StripPrefix ("/idem": pages at /idem/ui/…; empty at the root).
	// Its links, redirects and cookie carry it.
	BasePath string
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Clock == nil {
		c.Clock = idem.SystemClock{}
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.AbsoluteTimeout == 0 {
		c.AbsoluteTimeout = DefaultAbsoluteTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// console is the handler behind New.
type console struct {
	cfg      Config
	sessions *sessions
	mux      *http.ServeMux
	pages    map[string]*template.Template // with {{ui}}: the console's own root
}

// New returns the console; mount it at Prefix and at Prefix without its
// slash (under Config.BasePath). It panics when Runner or
// Auth is missing.
func New(cfg Config) http.Handler {
	cfg = cfg.WithDefaults()
	if cfg.Runner == nil || cfg.Auth == nil {
		panic("webui: Config needs Runner and Auth")
	}
	cfg.BasePath = strings.TrimRight(cfg.BasePath, "/")
	c := &console{cfg: cfg, sessions: newSessions(cfg.Clock, cfg.IdleTimeout, cfg.AbsoluteTimeout), mux: http.NewServeMux()}
	c.pages = pagesUnder(c.url(""))
	// The console's root and its assets' directory without their slash
	// are registered, so that the mux does not redirect them itself, to a
	// path without the base path.
	c.mux.HandleFunc("/ui", c.root)
	c.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/", staticFiles()))
	c.mux.HandleFunc("/ui/static", c.notFound)
	c.mux.HandleFunc("GET /ui/{$}", c.home)
	c.mux.HandleFunc("GET /ui/signin", c.signinForm)
	c.mux.HandleFunc("POST /ui/signin", c.signin)
	c.mux.HandleFunc("POST /ui/signout", c.post(c.signout))
	c.mux.HandleFunc("GET /ui/approvals", c.page(c.approvals))
	c.mux.HandleFunc("GET /ui/approvals/{id}", c.page(c.approval))
	c.mux.HandleFunc("POST /ui/approvals/{id}/decide", c.post(c.decide))
	c.mux.HandleFunc("GET /ui/executions", c.page(c.executions))
	c.mux.HandleFunc("GET /ui/executions/{id}", c.page(c.execution))
	c.mux.HandleFunc("GET /ui/attempts", c.page(c.attempts))
	c.mux.HandleFunc("GET /ui/catalog", c.page(c.catalog))
	c.mux.HandleFunc("/ui/", c.notFound)
	return c
}

// url is the browser's path of a console page (rest: "approvals"), with
// the base path it is mounted under.
func (c *console) url(rest string) string { return c.cfg.BasePath + Prefix + rest }

// ServeHTTP sets the headers every console answer carries.
func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

func (c *console) notFound(w http.ResponseWriter, r *http.Request) {
	c.fail(w, r, nil, idem.Errorf(idem.CodeNotFound, "there is no console page at %s", r.URL.Path))
}

// root redirects the console's root without its slash to the root, under
// the base path.
func (c *console) root(w http.ResponseWriter, r *http.Request) {
	u := url.URL{Path: c.url(""), RawQuery: r.URL.RawQuery}
	http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
}

func (c *console) home(w http.ResponseWriter, r *http.Request) {
	if c.current(r) == nil {
		http.Redirect(w, r, c.url("signin"), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, c.url("approvals"), http.StatusSeeOther)
}

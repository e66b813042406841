package webui

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/idem-run/idem"
)

// cookieName names the session cookie.
const cookieName = "idem_session"

// csrfField is the form field carrying the session's synchronizer token.
const csrfField = "csrf"

// signinKinds are the principal kinds that may sign in: people.
var signinKinds = map[idem.PrincipalKind]bool{idem.KindBrowser: true, idem.KindCLISession: true}

// current returns the request's live session, or nil.
func (c *console) current(r *http.Request) *session {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	return c.sessions.lookup(ck.Value)
}

// page wraps a GET page that needs a session: without one it sends the
// browser to sign in.
func (c *console) page(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess := c.current(r)
		if sess == nil {
			http.Redirect(w, r, c.url("signin")+"?next="+url.QueryEscape(c.cfg.BasePath+r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		next(w, r, sess)
	}
}

// post wraps a state-changing request: it must come from this site, carry a
// session and that session's CSRF token.
func (c *console) post(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := sameOrigin(r); err != nil {
			c.fail(w, r, nil, err)
			return
		}
		sess := c.current(r)
		if sess == nil {
			c.fail(w, r, nil, idem.Errorf(idem.CodeUnauthenticated, "your session has ended; sign in again"))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !sess.validCSRF(r.PostFormValue(csrfField)) {
			c.fail(w, r, sess, idem.Errorf(idem.CodeForbidden, "the form's CSRF token is missing or stale; reload the page and submit it again"))
			return
		}
		next(w, r, sess)
	}
}

// sameOrigin refuses a request a browser marks as cross-site: a
// Sec-Fetch-Site other than same-origin or none, or an Origin header that
// names another origin.
func sameOrigin(r *http.Request) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return idem.Errorf(idem.CodeForbidden, "the console refuses %s requests (Sec-Fetch-Site); use its own forms", site)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if !strings.EqualFold(origin, scheme+"://"+r.Host) {
		return idem.Errorf(idem.CodeForbidden, "the console refuses requests from origin %s; use its own forms", origin)
	}
	return nil
}

// setCookie writes the session cookie; an empty id with maxAge -1 removes it.
func (c *console) setCookie(w http.ResponseWriter, r *http.Request, id string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: id, Path: c.url(""), MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

func (c *console) signinForm(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	c.render(w, r, http.StatusOK, "signin", nil, signinView{Next: safeNext(c.url(""), r.URL.Query().Get("next"))})
}

type signinView struct {
	Next  string
	Error *idem.Error
}

// signin checks the token with the API's authenticator and opens a session
// for a person (browser or cli_session kinds). There is no session to bind
// a CSRF token to yet: the same-origin check and the SameSite cookie guard
// this form.
func (c *console) signin(w http.ResponseWriter, r *http.Request) {
	if err := sameOrigin(r); err != nil {
		c.fail(w, r, nil, err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	view := signinView{Next: safeNext(c.url(""), r.PostFormValue("next"))}
	p, err := c.cfg.Auth.Authenticate(withBearer(r, strings.TrimSpace(r.PostFormValue("token"))))
	if err != nil {
		view.Error = idem.Errorf(idem.CodeUnauthenticated, "that token is not known; paste a token issued to you")
		c.render(w, r, http.StatusUnauthorized, "signin", nil, view)
		return
	}
	if !signinKinds[p.Kind] {
		view.Error = idem.Errorf(idem.CodeForbidden, "principal %s is of kind %s; only people (kinds browser and cli_session) sign in to the console — agents and service accounts use the API", p.ID, p.Kind)
		c.render(w, r, http.StatusForbidden, "signin", nil, view)
		return
	}
	if old, err := r.Cookie(cookieName); err == nil {
		c.sessions.close(old.Value)
	}
	id, _ := c.sessions.open(p)
	c.setCookie(w, r, id, max(int(c.sessions.lifetime(p).Seconds()), 1))
	c.cfg.Logger.Info("console sign-in", "org", p.Org, "principal", p.ID, "kind", p.Kind)
	http.Redirect(w, r, view.Next, http.StatusSeeOther)
}

func (c *console) signout(w http.ResponseWriter, r *http.Request, _ *session) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.sessions.close(ck.Value)
	}
	c.setCookie(w, r, "", -1)
	http.Redirect(w, r, c.url("signin"), http.StatusSeeOther)
}

// safeNext keeps a post-sign-in redirect inside the console mounted at
// root ("/ui/", or "/idem/ui/" under a base path).
func safeNext(root, next string) string {
	if !strings.HasPrefix(next, root) || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return root + "approvals"
	}
	return next
}

// withBearer is r as the API's authenticator sees a call with token: the
// typed token as its only credential (the console's own cookie and form
// are not credentials of the API).
func withBearer(r *http.Request, token string) *http.Request {
	r = r.Clone(r.Context())
	r.Header = http.Header{}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

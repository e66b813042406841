package webui

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

func TestSigninCookie(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name   string
		extra  []string
		secure bool
	}{
		{"plain HTTP", nil, false},
		{"TLS", []string{"TLS", ""}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := f.do("POST", "/ui/signin", url.Values{"token": {"t-bob"}, "next": {"/ui/catalog"}}, "", c.extra...)
			if a.status != http.StatusSeeOther || a.location() != "/ui/catalog" {
				t.Fatalf("sign-in = %d to %q", a.status, a.location())
			}
			cookies := (&http.Response{Header: a.header}).Cookies()
			if len(cookies) != 1 {
				t.Fatalf("cookies = %v", cookies)
			}
			ck := cookies[0]
			if ck.Name != cookieName || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui/" || ck.Secure != c.secure {
				t.Fatalf("cookie = %+v (raw %q)", ck, a.header.Get("Set-Cookie"))
			}
			if page := f.do("GET", "/ui/approvals", nil, ck.Value); page.status != 200 || !strings.Contains(page.body, `id="whoami">bob<`) {
				t.Fatalf("signed-in page = %d %s", page.status, page.body)
			}
		})
	}
}

func TestSigninRefusals(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name, token string
		status      int
		code        idem.Code
	}{
		{"unknown token", "nope", 401, idem.CodeUnauthenticated},
		{"empty token", "", 401, idem.CodeUnauthenticated},
		{"agent", "t-agent", 403, idem.CodeForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := f.do("POST", "/ui/signin", url.Values{"token": {c.token}}, "")
			if a.status != c.status || !strings.Contains(a.body, string(c.code)) || a.header.Get("Set-Cookie") != "" {
				t.Fatalf("got %d (cookie %q), want %d %s: %s", a.status, a.header.Get("Set-Cookie"), c.status, c.code, a.body)
			}
		})
	}
	if a := f.do("POST", "/ui/signin", url.Values{"token": {"t-agent"}}, ""); !strings.Contains(a.body, "only people") {
		t.Fatalf("the agent's refusal does not explain itself: %s", a.body)
	}
	a := f.do("POST", "/ui/signin", url.Values{"token": {"t-bob"}}, "", "Sec-Fetch-Site", "cross-site")
	wantError(t, a, 403, idem.CodeForbidden)
}

func TestSigninRedirectStaysInConsole(t *testing.T) {
	for next, want := range map[string]string{
		"/ui/executions?outcome=failed": "/ui/executions?outcome=failed",
		"":                              "/ui/approvals",
		"https://evil.example/ui/":      "/ui/approvals",
		"//evil.example/ui/":            "/ui/approvals",
		"/ui/\\evil":                    "/ui/approvals",
		"/v1/approvals":                 "/ui/approvals",
	} {
		if got := safeNext(Prefix, next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestPagesNeedASession(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/ui/approvals", "/ui/executions", "/ui/catalog", "/ui/attempts?key=k"} {
		a := f.do("GET", path, nil, "")
		if a.status != http.StatusSeeOther || !strings.HasPrefix(a.location(), "/ui/signin?next=") {
			t.Errorf("GET %s without a session = %d to %q", path, a.status, a.location())
		}
		if a := f.do("GET", path, nil, "forged"); a.status != http.StatusSeeOther {
			t.Errorf("GET %s with a forged cookie = %d", path, a.status)
		}
	}
	if a := f.do("GET", "/ui/", nil, ""); a.location() != "/ui/signin" {
		t.Errorf("GET /ui/ = %d to %q", a.status, a.location())
	}
}

// Every POST needs the session's CSRF token and a same-site origin.
func TestCSRF(t *testing.T) {
	f := newFixture(t)
	id := f.requestApproval(agent, "k1")
	cookie := f.signin("t-bob")
	token := f.csrf(cookie)
	other := f.csrf(f.signin("t-bob"))
	decide := "/ui/approvals/" + id + "/decide"
	for _, c := range []struct {
		name    string
		form    url.Values
		headers []string
		cookie  string
		status  int
		code    idem.Code
	}{
		{"no token", url.Values{"decision": {"approve"}}, nil, cookie, 403, idem.CodeForbidden},
		{"wrong token", url.Values{"decision": {"approve"}, "csrf": {"x" + token}}, nil, cookie, 403, idem.CodeForbidden},
		{"another session's token", url.Values{"decision": {"approve"}, "csrf": {other}}, nil, cookie, 403, idem.CodeForbidden},
		{"token in the query only", url.Values{"decision": {"approve"}}, nil, cookie, 403, idem.CodeForbidden},
		{"cross-site fetch", url.Values{"decision": {"approve"}, "csrf": {token}}, []string{"Sec-Fetch-Site", "cross-site"}, cookie, 403, idem.CodeForbidden},
		{"same-site fetch", url.Values{"decision": {"approve"}, "csrf": {token}}, []string{"Sec-Fetch-Site", "same-site"}, cookie, 403, idem.CodeForbidden},
		{"foreign origin", url.Values{"decision": {"approve"}, "csrf": {token}}, []string{"Origin", "https://evil.example"}, cookie, 403, idem.CodeForbidden},
		{"no session", url.Values{"decision": {"approve"}, "csrf": {token}}, nil, "", 401, idem.CodeUnauthenticated},
	} {
		t.Run(c.name, func(t *testing.T) {
			target := decide
			if c.name == "token in the query only" {
				target += "?csrf=" + url.QueryEscape(token)
			}
			wantError(t, f.do("POST", target, c.form, c.cookie, c.headers...), c.status, c.code)
		})
	}
	if a, _ := f.runner.GetApproval(t.Context(), bob, id); a.Status != idem.ApprovalPending {
		t.Fatalf("a refused POST decided the approval: %s", a.Status)
	}
	a := f.do("POST", decide, url.Values{"decision": {"approve"}, "reason": {"checked"}, "csrf": {token}}, cookie,
		"Sec-Fetch-Site", "same-origin", "Origin", "http://example.com")
	if a.status != http.StatusSeeOther || a.location() != "/ui/approvals/"+id {
		t.Fatalf("decision with the token = %d to %q: %s", a.status, a.location(), a.body)
	}
	got, err := f.runner.GetApproval(t.Context(), bob, id)
	if err != nil || got.Status != idem.ApprovalApproved || got.DecisionReason == nil || *got.DecisionReason != "checked" {
		t.Fatalf("approval after the decision = %+v, %v", got, err)
	}
}

func TestSignout(t *testing.T) {
	f := newFixture(t)
	cookie := f.signin("t-alice")
	token := f.csrf(cookie)
	wantError(t, f.do("POST", "/ui/signout", url.Values{}, cookie), 403, idem.CodeForbidden)
	a := f.do("POST", "/ui/signout", url.Values{"csrf": {token}}, cookie)
	if a.status != http.StatusSeeOther || !strings.Contains(a.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("sign-out = %d, Set-Cookie %q", a.status, a.header.Get("Set-Cookie"))
	}
	if a := f.do("GET", "/ui/approvals", nil, cookie); a.status != http.StatusSeeOther {
		t.Fatalf("the session still works after sign-out: %d", a.status)
	}
}

func TestSessionIdleExpiry(t *testing.T) {
	f := newFixture(t)
	cookie := f.signin("t-alice")
	f.clock.Advance(10 * time.Minute)
	if a := f.do("GET", "/ui/approvals", nil, cookie); a.status != http.StatusSeeOther {
		t.Fatalf("an idle session still works: %d", a.status)
	}
}

func TestSecurityHeaders(t *testing.T) {
	f := newFixture(t)
	a := f.do("GET", "/ui/signin", nil, "")
	for name, want := range map[string]string{
		"Content-Security-Policy": "default-src 'none'",
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
	} {
		if !strings.Contains(a.header.Get(name), want) {
			t.Errorf("%s = %q, want it to contain %q", name, a.header.Get(name), want)
		}
	}
}

package e2e

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// TestUIConsole drives the web console in headless Chromium against a real
// `idem serve --demo`: an approver approves an agent's refund and the
// agent's retry runs once; self-approval, a non-approver and a CSRF-less
// POST are refused. With IDEM_UPDATE_SCREENSHOTS=1 it writes the README's
// screenshots to docs/img/.
func TestUIConsole(t *testing.T) {
	ctx := newBrowser(t)
	dir := t.TempDir()
	s := serve(t, "sqlite:"+filepath.Join(dir, "idem.db"), dir)
	b := &browserPage{t: t, ctx: ctx, base: s.url}

	// An agent's refund over 5000 waits for approval. Its first attempt
	// will time out (demo fault injection), so the timeline shows a runtime
	// retry too.
	body := `{"amount":6000,"simulate":{"timeoutOnce":true}}`
	req := s.do(t, "POST", "/v1/orders/ord_9/refund", "demo-agent", body, "Idempotency-Key", "ui-refund-9").want(t, 403, "APPROVAL_REQUIRED")
	id, _ := req.get("details.approvalId").(string)
	if id == "" {
		t.Fatalf("APPROVAL_REQUIRED without approvalId: %s", req.raw)
	}

	// Agents cannot sign in; the approver can, and sees the request.
	b.signin("demo-agent")
	if msg := b.text("main"); !strings.Contains(msg, "FORBIDDEN") || !strings.Contains(msg, "only people") {
		t.Fatalf("agent sign-in page says %q", msg)
	}
	b.signin("demo-approver")
	b.waitVisible("#whoami")
	if who := b.text("#whoami"); who != "bob" {
		t.Fatalf("signed in as %q, want bob", who)
	}
	card := "#approval-" + id
	b.waitVisible(card)
	text := b.text(card)
	for _, want := range []string{"order.refund", "agent-1", `"amount": 6000`, `"id": "ord_9"`, "Bound fingerprint", "refunds over 5000"} {
		if !strings.Contains(text, want) {
			t.Errorf("inbox card lacks %q:\n%s", want, text)
		}
	}
	b.waitFor(`document.querySelector("` + card + ` .countdown").textContent.startsWith("(in ")`)
	b.screenshot("console-inbox.png")

	// Approve with a reason, using the keyboard path: type, then the button.
	b.do(chromedp.SendKeys(chromedp.CSS("#reason-"+id), "customer called"))
	b.navigate(chromedp.Click(chromedp.CSS(card + ` button[value="approve"]`)))
	b.waitVisible(card)
	if text := b.text(card); !strings.Contains(text, "approved") || !strings.Contains(text, "customer called") {
		t.Fatalf("approval page after approving:\n%s", text)
	}

	// The agent's retry (same key, same body) runs once; another is a replay.
	done := s.do(t, "POST", "/v1/orders/ord_9/refund", "demo-agent", body, "Idempotency-Key", "ui-refund-9").want(t, 200, "")
	again := s.do(t, "POST", "/v1/orders/ord_9/refund", "demo-agent", body, "Idempotency-Key", "ui-refund-9").want(t, 200, "")
	execID, _ := done.get("meta.executionId").(string)
	if again.get("meta.idempotency.replayed") != true || again.get("meta.executionId") != execID {
		t.Fatalf("second retry = %s", again.raw)
	}
	if got := s.do(t, "GET", "/v1/approvals/"+id, "demo-agent", "").want(t, 200, ""); got.get("data.status") != "consumed" || got.get("data.executionId") != execID {
		t.Fatalf("approval after the retry = %s", got.raw)
	}
	effects := 0
	for _, e := range ledgerEffects(t, s, "demo-agent") {
		if e["requestKey"] == "ui-refund-9" {
			effects++
			if e["applied"] != true || e["calls"] != float64(1) || len(e["executionIds"].([]any)) != 1 {
				t.Fatalf("ledger effect = %v", e)
			}
		}
	}
	if effects != 1 {
		t.Fatalf("%d ledger effects for one key, want 1", effects)
	}

	// The execution's timeline in the explorer.
	b.open("/ui/executions?operation=order.refund&principal=agent-1")
	b.navigate(chromedp.Click(chromedp.CSS(`a[href="/ui/executions/` + execID + `"]`)))
	b.waitVisible(".timeline")
	timeline := b.text(".timeline")
	for _, want := range []string{"Started", "Approval consumed", id, "Runtime retry attempt 2 after TIMEOUT", "Completed after 2 attempts", "Replay served"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("timeline lacks %q:\n%s", want, timeline)
		}
	}
	b.screenshot("console-execution.png")

	// Self-approval: the approver's own request shows a disabled,
	// explained button, and a forged POST is refused by the runner.
	own := s.do(t, "POST", "/v1/orders/ord_10/refund", "demo-approver", `{"amount":7000}`, "Idempotency-Key", "ui-own-10").want(t, 403, "APPROVAL_REQUIRED")
	ownID, _ := own.get("details.approvalId").(string)
	b.open("/ui/approvals")
	ownCard := "#approval-" + ownID
	b.waitVisible(ownCard)
	if n := b.count(ownCard + ` button[name="decision"]`); n != 0 {
		t.Fatalf("the requester has %d live decide buttons on its own request", n)
	}
	if n := b.count(ownCard + ` button[disabled]`); n != 2 || !strings.Contains(b.text(ownCard), "SELF_APPROVAL_FORBIDDEN") {
		t.Fatalf("own request: %d disabled buttons, text:\n%s", n, b.text(ownCard))
	}
	cookie := b.sessionCookie()
	csrf := b.csrf()
	decide := "/ui/approvals/" + ownID + "/decide"
	status, page := postForm(t, s.url+decide, cookie, url.Values{"decision": {"approve"}, "csrf": {csrf}})
	if status != 403 || !strings.Contains(page, "SELF_APPROVAL_FORBIDDEN") {
		t.Fatalf("self-approval POST = %d:\n%s", status, page)
	}

	// A POST without the CSRF token is refused, even with the session.
	status, page = postForm(t, s.url+"/ui/approvals/"+ownID+"/decide", cookie, url.Values{"decision": {"reject"}})
	if status != 403 || !strings.Contains(page, `id="error-code">FORBIDDEN<`) || !strings.Contains(page, "CSRF") {
		t.Fatalf("CSRF-less POST = %d:\n%s", status, page)
	}
	if got := s.do(t, "GET", "/v1/approvals/"+ownID, "demo-approver", "").want(t, 200, ""); got.get("data.status") != "pending" {
		t.Fatalf("a refused POST changed the approval: %s", got.raw)
	}

	// Sign out; a non-approver sees her own request without decide buttons.
	b.navigate(chromedp.Click(chromedp.CSS(`form[action="/ui/signout"] button`)))
	b.waitVisible("#token")
	if status, _ := postForm(t, s.url+decide, cookie, url.Values{"decision": {"reject"}, "csrf": {csrf}}); status != 401 {
		t.Fatalf("the signed-out session still posts: %d", status)
	}
	alice := s.do(t, "POST", "/v1/orders/ord_11/refund", "demo-browser", `{"amount":6000}`, "Idempotency-Key", "ui-alice-11").want(t, 403, "APPROVAL_REQUIRED")
	aliceID, _ := alice.get("details.approvalId").(string)
	b.signin("demo-browser")
	b.waitVisible("#approval-" + aliceID)
	if n := b.count(`button[name="decision"]`); n != 0 {
		t.Fatalf("a non-approver sees %d decide buttons", n)
	}
	if n := b.count("article.card"); n != 1 {
		t.Fatalf("alice sees %d approvals, want only her own", n)
	}
	if !strings.Contains(b.text("#approval-"+aliceID), "Only holders of the approver role") {
		t.Fatalf("the missing buttons are not explained:\n%s", b.text("#approval-"+aliceID))
	}
}

// newBrowser starts headless Chromium for one test. Without a browser the
// test skips, or fails when IDEM_TEST_REQUIRE_BROWSER=1 (CI).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := "/usr/bin/chromium"
	if _, err := os.Stat(path); err != nil {
		if path, err = exec.LookPath("chromium"); err != nil {
			msg := "no chromium found (/usr/bin/chromium or on PATH); install it (apt-get install chromium) to run the web console's browser test"
			if os.Getenv("IDEM_TEST_REQUIRE_BROWSER") == "1" {
				t.Fatal(msg + " (IDEM_TEST_REQUIRE_BROWSER=1)")
			}
			t.Skip(msg)
		}
	}
	// The network here is closed: these flags keep Chromium from waiting on
	// Google hosts.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(browserCtx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return browserCtx
}

// browserPage is the test's one tab.
type browserPage struct {
	t    *testing.T
	ctx  context.Context
	base string
}

func (b *browserPage) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

// navigate runs a step that loads a page (a click on a link or a submit
// button) and waits for the answer.
func (b *browserPage) navigate(step chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if _, err := chromedp.RunResponse(b.ctx, step); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

func (b *browserPage) open(path string) {
	b.t.Helper()
	b.do(chromedp.Navigate(b.base + path))
}

func (b *browserPage) signin(token string) {
	b.t.Helper()
	b.open("/ui/signin")
	b.do(chromedp.WaitVisible(chromedp.CSS("#token")), chromedp.SendKeys(chromedp.CSS("#token"), token))
	b.navigate(chromedp.Click(chromedp.CSS(`form[action="/ui/signin"] button[type="submit"]`)))
}

func (b *browserPage) waitVisible(sel string) {
	b.t.Helper()
	b.do(chromedp.WaitVisible(chromedp.CSS(sel)))
}

// waitFor polls a JavaScript condition until it holds.
func (b *browserPage) waitFor(cond string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](cond)); err != nil {
		b.t.Fatalf("browser: waiting for %s: %v", cond, err)
	}
}

func (b *browserPage) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("browser: text of %s: %v", sel, err)
	}
	return s
}

func (b *browserPage) count(sel string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+jsString(sel)+`).length`))
	if err != nil {
		b.t.Fatalf("browser: count %s: %v", sel, err)
	}
	return n
}

// csrf reads the synchronizer token from the sign-out form of the page.
func (b *browserPage) csrf() string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Value(chromedp.CSS(`form[action="/ui/signout"] input[name="csrf"]`)))
	if err != nil || v == "" {
		b.t.Fatalf("browser: CSRF token %q: %v", v, err)
	}
	return v
}

// sessionCookie reads the HttpOnly session cookie through DevTools (page
// scripts cannot) and checks its attributes.
func (b *browserPage) sessionCookie() string {
	b.t.Helper()
	cookies, err := chromedp.Run(b.ctx, chromedp.Action[[]*network.Cookie](func(ctx context.Context, t *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{URLs: []string{b.base + "/ui/"}})
		return res.Cookies, err
	}))
	if err != nil {
		b.t.Fatalf("browser: cookies: %v", err)
	}
	for _, c := range cookies {
		if c.Name == "idem_session" {
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Path != "/ui/" {
				b.t.Fatalf("session cookie = %+v", c)
			}
			return c.Value
		}
	}
	b.t.Fatalf("no idem_session cookie among %d", len(cookies))
	return ""
}

// screenshot writes docs/img/name when IDEM_UPDATE_SCREENSHOTS=1.
func (b *browserPage) screenshot(name string) {
	b.t.Helper()
	if os.Getenv("IDEM_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("browser: screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join("..", "docs", "img", name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

var jsUnsafe = regexp.MustCompile(`[^A-Za-z0-9 #._\-\[\]="]`)

// jsString quotes a selector for a JavaScript expression (selectors here
// are the test's own).
func jsString(s string) string {
	return "'" + jsUnsafe.ReplaceAllString(s, "") + "'"
}

// postForm posts a form with the session cookie, as a script outside the
// browser would, and returns the status and page.
func postForm(t *testing.T, target, cookie string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", target, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "idem_session", Value: cookie})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The console's inbox shows an approval a configured rule asked for
// (SPEC §8.1): the rule's name and its reason beside the call's
// arguments, as an approver sees it in the browser (issue 35 item 2).
func TestUIConsoleShowsConfiguredRule(t *testing.T) {
	ctx := newBrowser(t)
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte(`policies:
  - name: mid-refunds
    operations: ["order.refund"]
    when: 'args.amount > 1000'
    outcome: require_approval
    approverRole: approver
    reason: "Refunds over 1000 need a person."
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t, "sqlite:"+filepath.Join(dir, "idem.db"), dir, "--policies", policies)
	b := &browserPage{t: t, ctx: ctx, base: s.url}
	req := s.do(t, "POST", "/v1/orders/ord_7/refund", "demo-agent", `{"amount":1500}`, "Idempotency-Key", "ui-rule-7").want(t, 403, "APPROVAL_REQUIRED")
	id, _ := req.get("details.approvalId").(string)
	if id == "" || req.get("details.rule") != "mid-refunds" {
		t.Fatalf("APPROVAL_REQUIRED without approvalId or rule: %s", req.raw)
	}
	b.signin("demo-approver")
	card := "#approval-" + id
	b.waitVisible(card)
	text := b.text(card)
	for _, want := range []string{"order.refund", "mid-refunds", "Refunds over 1000 need a person.", `"amount": 1500`} {
		if !strings.Contains(text, want) {
			t.Errorf("inbox card lacks %q:\n%s", want, text)
		}
	}
}

package webui

import (
	"bytes"
	"embed"
	"encoding/json"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"github.com/idem-run/idem"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// staticFiles serves the embedded styles and script under static/.
func staticFiles() http.Handler {
	sub, _ := fs.Sub(staticFS, ".")
	fileServer := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		fileServer.ServeHTTP(w, r)
	})
}

// pagesUnder returns the pages with {{ui}} (the start of every console
// link) rendering root, the console's path as the browser sees it.
func pagesUnder(root string) map[string]*template.Template {
	out := make(map[string]*template.Template, len(pages))
	for name, t := range pages {
		out[name] = template.Must(t.Clone()).Funcs(template.FuncMap{"ui": func() string { return root }})
	}
	return out
}

// pages holds each page's template, parsed with the layout.
var pages = func() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, name := range []string{"signin", "approvals", "approval", "executions", "execution", "attempts", "catalog", "error"} {
		out[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html", "templates/"+name+".html"))
	}
	return out
}()

var funcs = template.FuncMap{
	"ui":   func() string { return Prefix }, // pagesUnder sets the console's own
	"when": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"whenPtr": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"clock":  func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"iso":    func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"pretty": prettyJSON,
	"card": func(item approvalItem, csrf string) map[string]any {
		return map[string]any{"Item": item, "CSRF": csrf}
	},
	"indeterminate": indeterminate,
	"kindHelp":      func(k idem.RetryKind) string { return kindHelp[k] },
	"deref": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
}

// prettyJSON indents a JSON document for reading; invalid JSON is shown as is.
func prettyJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// view is what every page template gets.
type view struct {
	Title string
	// Session is nil on the sign-in and some error pages.
	Principal *idem.Principal
	CSRF      string
	Approver  bool
	Nav       string
	Data      any
}

// render writes page name with data.
func (c *console) render(w http.ResponseWriter, r *http.Request, status int, name string, sess *session, data any) {
	v := view{Nav: name, Data: data}
	if sess != nil {
		p := sess.principal
		v.Principal, v.CSRF, v.Approver = &p, sess.csrf, p.HasRole(idem.RoleApprover)
	}
	var b bytes.Buffer
	if err := c.pages[name].Execute(&b, v); err != nil {
		c.cfg.Logger.Error("console template", "page", name, "error", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// errorView is the error page: the SPEC code, its title and what to do.
type errorView struct {
	Status  int
	Code    idem.Code
	Title   string
	Message string
	Action  string
}

// fail renders err as an HTML error page with its code and status.
func (c *console) fail(w http.ResponseWriter, r *http.Request, sess *session, err error) {
	e := idem.AsError(err)
	if e.Code == idem.CodeInternal && e.Err != nil {
		c.cfg.Logger.Error("console", "path", r.URL.Path, "error", e.Err)
	}
	info := e.Code.Info()
	status := e.Status
	if status == 0 {
		status = info.Status
	}
	c.render(w, r, status, "error", sess, errorView{Status: status, Code: e.Code, Title: info.Title, Message: e.Message, Action: info.Action})
}

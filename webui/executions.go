package webui

import (
	"net/http"
	"strings"

	"github.com/idem-run/idem"
)

// executionsView is the explorer: filters and the matching executions.
type executionsView struct {
	Filter     idem.ListExecutionsParams
	Operations []string
	Outcomes   []idem.Outcome
	Items      []idem.Execution
}

func (c *console) executions(w http.ResponseWriter, r *http.Request, sess *session) {
	q := r.URL.Query()
	f := idem.ListExecutionsParams{
		Operation: strings.TrimSpace(q.Get("operation")),
		Principal: strings.TrimSpace(q.Get("principal")),
		Outcome:   idem.Outcome(q.Get("outcome")),
		Limit:     100,
	}
	list, err := c.cfg.Runner.ListExecutions(r.Context(), sess.principal, f)
	if err != nil {
		c.fail(w, r, sess, err)
		return
	}
	v := executionsView{Filter: f, Items: list,
		Outcomes: []idem.Outcome{idem.OutcomeRunning, idem.OutcomeSucceeded, idem.OutcomeFailed}}
	for _, d := range c.cfg.Runner.Descriptors() {
		v.Operations = append(v.Operations, d.Name)
	}
	c.render(w, r, http.StatusOK, "executions", sess, v)
}

// executionView is one execution with its timeline.
type executionView struct {
	idem.Execution
	Timeline []step
	// Indeterminate: a keyed execution that failed on the server's side,
	// so its attempt record cannot tell whether it took effect.
	Indeterminate bool
	// AttemptKey is the key of the signed-in principal's own keyed
	// execution, for the attempt lookup link; empty otherwise.
	AttemptKey string
	// ReinvocationRemoved: the execution ReinvocationOf names is gone
	// (past the audit retention), so it is shown without a link.
	ReinvocationRemoved bool
}

func (c *console) execution(w http.ResponseWriter, r *http.Request, sess *session) {
	x, err := c.cfg.Runner.GetExecution(r.Context(), sess.principal, r.PathValue("id"))
	if err != nil {
		c.fail(w, r, sess, err)
		return
	}
	v := executionView{Execution: x, Indeterminate: indeterminate(x)}
	v.Timeline = timeline(x, v.Indeterminate)
	if x.Key != "" && x.Principal == sess.principal.ID {
		v.AttemptKey = x.Key
	}
	if x.ReinvocationOf != nil {
		// Any other failure keeps the link: the page it leads to says why.
		_, err := c.cfg.Runner.GetExecution(r.Context(), sess.principal, *x.ReinvocationOf)
		v.ReinvocationRemoved = idem.ErrorCode(err) == idem.CodeNotFound
	}
	c.render(w, r, http.StatusOK, "execution", sess, v)
}

// attemptsView is the attempt lookup form and its answer.
type attemptsView struct {
	Key     string
	Attempt *idem.AttemptView
	Error   *idem.Error
}

// attempts looks up the signed-in principal's own attempt record by key.
func (c *console) attempts(w http.ResponseWriter, r *http.Request, sess *session) {
	v := attemptsView{Key: r.URL.Query().Get("key")}
	status := http.StatusOK
	if v.Key != "" {
		a, err := c.cfg.Runner.GetAttempt(r.Context(), sess.principal, v.Key)
		if err != nil {
			v.Error = idem.AsError(err)
			status = v.Error.Status
		} else {
			v.Attempt = &a
		}
	}
	c.render(w, r, status, "attempts", sess, v)
}

package webui

import (
	"net/http"
	"net/url"
	"slices"

	"github.com/idem-run/idem"
)

// approvalsView is the inbox: pending approvals, or the history tab.
type approvalsView struct {
	Tab   string // "pending" or "history"
	Items []approvalItem
}

// approvalItem is an approval with what the signed-in principal may do.
type approvalItem struct {
	idem.Approval
	// Own is set on the signed-in principal's own request: an approver
	// sees a disabled button there, explained.
	Own bool
	// CanDecide is set when decide buttons are shown (approvers, pending).
	CanDecide bool
}

func (c *console) item(sess *session, a idem.Approval) approvalItem {
	own := a.RequestedBy == sess.principal.ID
	return approvalItem{Approval: a, Own: own,
		CanDecide: a.Status == idem.ApprovalPending && sess.principal.HasRole(a.DecidedByRole())}
}

// historyStatuses are the states the history tab lists.
var historyStatuses = []idem.ApprovalStatus{idem.ApprovalApproved, idem.ApprovalRejected, idem.ApprovalConsumed, idem.ApprovalExpired}

func (c *console) approvals(w http.ResponseWriter, r *http.Request, sess *session) {
	v := approvalsView{Tab: "pending", Items: []approvalItem{}}
	statuses := []idem.ApprovalStatus{idem.ApprovalPending}
	if r.URL.Query().Get("tab") == "history" {
		v.Tab, statuses = "history", historyStatuses
	}
	var list []idem.Approval
	for _, status := range statuses {
		some, err := c.cfg.Runner.ListApprovals(r.Context(), sess.principal, status)
		if err != nil {
			c.fail(w, r, sess, err)
			return
		}
		list = append(list, some...)
	}
	slices.SortStableFunc(list, func(a, b idem.Approval) int { return b.CreatedAt.Compare(a.CreatedAt) })
	for _, a := range list {
		v.Items = append(v.Items, c.item(sess, a))
	}
	c.render(w, r, http.StatusOK, "approvals", sess, v)
}

func (c *console) approval(w http.ResponseWriter, r *http.Request, sess *session) {
	a, err := c.cfg.Runner.GetApproval(r.Context(), sess.principal, r.PathValue("id"))
	if err != nil {
		c.fail(w, r, sess, err)
		return
	}
	c.render(w, r, http.StatusOK, "approval", sess, c.item(sess, a))
}

// decide approves or rejects through the Runner, which applies every rule
// (role, self-approval, state); its refusal is shown as the error page.
func (c *console) decide(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	var approve bool
	switch r.PostFormValue("decision") {
	case "approve":
		approve = true
	case "reject":
	default:
		c.fail(w, r, sess, idem.Errorf(idem.CodeInvalidInput, "decision must be approve or reject"))
		return
	}
	a, err := c.cfg.Runner.DecideApproval(r.Context(), sess.principal, id, approve, r.PostFormValue("reason"))
	if err != nil {
		c.fail(w, r, sess, err)
		return
	}
	c.cfg.Logger.Info("console decision", "org", sess.principal.Org, "principal", sess.principal.ID, "approvalId", a.ID, "status", a.Status)
	http.Redirect(w, r, c.url("approvals/"+url.PathEscape(a.ID)), http.StatusSeeOther)
}

package webui

import (
	"fmt"
	"time"

	"github.com/idem-run/idem"
)

// step is one line of an execution's timeline.
type step struct {
	At    time.Time
	Kind  string // CSS class: started, policy, retried, approval, succeeded, failed, indeterminate, replayed
	Label string
	Text  string
	// ApprovalID links an approval.consumed step to its approval.
	ApprovalID string
	// Cause is a failed step's sanitized cause (the final event's
	// data.cause), when the handler failed.
	Cause string
}

// indeterminate reports whether x is a keyed execution that failed on the
// server's side (5xx or cancelled): its attempt record cannot say whether
// the effect happened (SPEC §6.4).
func indeterminate(x idem.Execution) bool {
	if x.Key == "" || x.Outcome != idem.OutcomeFailed || x.Code == nil {
		return false
	}
	return x.Code.Info().Status >= 500 || *x.Code == idem.CodeCancelled
}

// timeline turns x's audit events into readable steps, in order.
func timeline(x idem.Execution, indeterminate bool) []step {
	out := make([]step, 0, len(x.Events)+1)
	for _, ev := range x.Events {
		s := step{At: ev.At, Kind: ev.Type}
		switch ev.Type {
		case idem.EventStarted:
			s.Kind, s.Label, s.Text = "started", "Started", fmt.Sprintf("attempt %d", max(ev.Attempt, 1))
		case idem.EventRetried:
			s.Kind, s.Label = "retried", "Runtime retry"
			s.Text = fmt.Sprintf("attempt %d after %s", ev.Attempt, ev.PreviousErrorCode)
		case idem.EventPolicyDecided:
			s.Kind, s.Label = "policy", "Policy decided"
			s.Text = ev.Data["rule"] + ": " + ev.Data["outcome"]
		case idem.EventApprovalConsumed:
			s.Kind, s.Label, s.ApprovalID = "approval", "Approval consumed", ev.Data["approvalId"]
		case idem.EventSucceeded:
			s.Kind, s.Label = "succeeded", "Completed"
			s.Text = fmt.Sprintf("after %s in %d ms", plural(ev.Attempts, "attempt"), ev.DurationMs)
		case idem.EventFailed:
			s.Kind, s.Label = "failed", "Failed"
			if indeterminate {
				s.Kind, s.Label = "indeterminate", "Failed, result indeterminate"
			}
			s.Text = fmt.Sprintf("%s after %s in %d ms", ev.Code, plural(ev.Attempts, "attempt"), ev.DurationMs)
			s.Cause = ev.Data["cause"]
		case idem.EventReplayed:
			s.Kind, s.Label = "replayed", "Replay served"
			s.Text = "the stored result was answered again"
			if st := ev.Data["status"]; st != "" {
				s.Text = "the stored result (HTTP " + st + ") was answered again"
			}
		default:
			s.Label = ev.Type
		}
		out = append(out, s)
	}
	if x.Outcome == idem.OutcomeRunning {
		out = append(out, step{Kind: "running", Label: "Running", Text: "no final event yet"})
	}
	return out
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

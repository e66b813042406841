package storetest

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idem-run/idem"
)

// Workload runs n rounds of every kind of call of the hot path through s,
// as scope, keys prefixed by prefix: two-phase first executions and their
// replays, transactional ones (keyed, unkeyed, a business error, a
// replay), unkeyed executions, appended events, approvals and recorded
// executions. It is for tests that count what a store does (plans,
// scans), not a conformance test: it stops at the first call that does
// not answer as expected.
func Workload(ctx context.Context, s idem.Store, scope idem.Scope, prefix string, n int) error {
	tr, ok := s.(idem.Transactor)
	if !ok {
		return fmt.Errorf("%T does not implement idem.Transactor", s)
	}
	committed := func(context.Context, any) idem.TxOutcome {
		return idem.TxOutcome{Result: idem.CompleteParams{Status: http.StatusCreated, Body: []byte(`{"id":"ord_1"}`),
			Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1,
				Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}}}
	}
	undone := func(context.Context, any) idem.TxOutcome {
		return idem.TxOutcome{Undo: true, Result: idem.CompleteParams{Status: http.StatusConflict, Body: []byte(`{}`),
			Finish: idem.FinishParams{Outcome: idem.OutcomeFailed, Code: idem.CodeExecutionFailed, Attempts: 1}}}
	}
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		p := idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: "exe_" + key, Scope: scope, Operation: "op", Fingerprint: fmt.Sprint("fp", i%7)},
			Key:         key, Lease: time.Minute, Retention: 24 * time.Hour,
		}
		// Two-phase: first execution, then its replays.
		res, err := s.Reserve(ctx, p)
		if err != nil || !res.Reserved {
			return fmt.Errorf("Reserve %s: %+v, %v", key, res, err)
		}
		if _, err := s.Complete(ctx, idem.CompleteParams{Scope: scope, Key: key, FencingToken: res.Attempt.FencingToken, Status: 201,
			Body: []byte(`{"id":"ord_1"}`), Finish: idem.FinishParams{Org: scope.Org, ExecutionID: p.ExecutionID,
				Outcome: idem.OutcomeSucceeded, Attempts: 1, Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}}); err != nil {
			return fmt.Errorf("Complete %s: %v", key, err)
		}
		if _, err := s.GetAttempt(ctx, idem.GetAttemptParams{Scope: scope, Key: key}); err != nil {
			return err
		}
		again := p
		again.ExecutionID += "_again"
		if res, err := s.Reserve(ctx, again); err != nil || res.Reserved {
			return fmt.Errorf("Reserve of a completed key: %+v, %v", res, err)
		}
		// Transactional: first execution, its replay, a business error.
		tp := p
		tp.Key, tp.ExecutionID = "tx-"+key, "exe_tx_"+key
		if res, err := tr.Transact(ctx, tp, committed); err != nil || !res.Committed {
			return fmt.Errorf("Transact %s: %+v, %v", tp.Key, res, err)
		}
		tp.ExecutionID += "_again"
		if res, err := tr.Transact(ctx, tp, committed); err != nil || res.Reserved {
			return fmt.Errorf("Transact of a completed key: %+v, %v", res, err)
		}
		if i%5 == 0 {
			up := p
			up.Key, up.ExecutionID = "undo-"+key, "exe_undo_"+key
			if res, err := tr.Transact(ctx, up, undone); err != nil || !res.Committed {
				return fmt.Errorf("Transact undone: %+v, %v", res, err)
			}
			unkeyed := p
			unkeyed.Key, unkeyed.ExecutionID = "", "exe_unkeyed_"+key
			if res, err := tr.Transact(ctx, unkeyed, committed); err != nil || !res.Committed {
				return fmt.Errorf("Transact unkeyed: %+v, %v", res, err)
			}
			x, err := s.StartExecution(ctx, idem.StartParams{ExecutionID: "exe_u_" + key, Scope: scope, Operation: "read", Fingerprint: "fp"})
			if err != nil {
				return err
			}
			if err := s.FinishExecution(ctx, idem.FinishParams{Org: scope.Org, ExecutionID: x.ID, Outcome: idem.OutcomeSucceeded, Attempts: 1,
				Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1}}}); err != nil {
				return err
			}
			if err := s.AppendEvents(ctx, idem.AppendEventsParams{Org: scope.Org, Events: []idem.AuditEvent{
				{ExecutionID: p.ExecutionID, Type: idem.EventReplayed}}}); err != nil {
				return err
			}
			if _, err := s.GetExecution(ctx, idem.GetExecutionParams{Org: scope.Org, ID: p.ExecutionID}); err != nil {
				return err
			}
		}
		if i%25 == 0 {
			apr, err := s.RequestApproval(ctx, idem.RequestApprovalParams{ID: "apr_" + key, Org: scope.Org, RequestedBy: scope.Principal,
				Operation: "op", Fingerprint: "fp-apr-" + key, Reason: "r", Expiry: time.Hour})
			if err != nil {
				return err
			}
			if _, err := s.DecideApproval(ctx, idem.DecideApprovalParams{Org: scope.Org, ID: apr.Approval.ID,
				Decision: idem.Decision{Approve: true, By: "bob"}}); err != nil {
				return err
			}
			ap := p
			ap.Key, ap.ExecutionID, ap.Fingerprint, ap.ApprovalID = "apr-"+key, "exe_apr_"+key, "fp-apr-"+key, apr.Approval.ID
			if res, err := s.Reserve(ctx, ap); err != nil || !res.Reserved {
				return fmt.Errorf("Reserve with approval: %+v, %v", res, err)
			}
			var many []idem.AuditEvent
			for range 6 {
				many = append(many, idem.AuditEvent{ExecutionID: p.ExecutionID, Type: idem.EventReplayed})
			}
			if err := s.AppendEvents(ctx, idem.AppendEventsParams{Org: scope.Org, Events: many}); err != nil {
				return err
			}
			st := idem.StartParams{ExecutionID: "exe_rec_" + key, Scope: scope, Operation: "read", Fingerprint: "fp"}
			if err := s.RecordExecutions(ctx, idem.RecordExecutionsParams{Executions: []idem.FinishedExecution{{Start: st,
				Finish: idem.FinishParams{Org: scope.Org, ExecutionID: st.ExecutionID, Outcome: idem.OutcomeSucceeded, Attempts: 1}}}}); err != nil {
				return err
			}
		}
	}
	return nil
}

package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
)

// releaseSQL makes a reservation still in flight under its fence and
// lease let its key go, finishes its execution, gives back the approval
// it consumed when asked to and signals a watched one on idem_completed.
var releaseSQL = statement("release")

// Release implements idem.AttemptStore: one statement (and, for events
// naming another execution, a second).
func (s *Store) Release(ctx context.Context, p idem.ReleaseParams) error {
	return s.write(ctx, "release", func(ctx context.Context, tx pgx.Tx) error {
		now := s.now()
		fin := p.Finish
		ev, err := splitFinish(fin, now)
		if err != nil {
			return err
		}
		var executionID string
		var notified int
		err = tx.QueryRow(ctx, releaseSQL, p.Scope.Org, p.Scope.Principal, p.Key, p.FencingToken, now, notifyPayload(p.Scope, p.Key),
			string(fin.Outcome), nullable(string(fin.Code)), fin.Attempts, ev.encoded, ev.named, fin.ReturnApproval).Scan(&executionID, &notified)
		if errors.Is(err, pgx.ErrNoRows) {
			return idem.ErrFenced
		}
		if err != nil {
			return err
		}
		return insertEvents(ctx, tx, p.Scope.Org, ev.rows(executionID), now)
	})
}

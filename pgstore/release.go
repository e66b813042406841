package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
)

// releaseSQL deletes a reservation still in flight under its fence and
// lease and signals a watched one on idem_completed.
var releaseSQL = statement("release")

// Release implements idem.AttemptStore: the fenced delete and the
// execution's finish, in one transaction.
func (s *Store) Release(ctx context.Context, p idem.ReleaseParams) error {
	return s.write(ctx, "release", func(ctx context.Context, tx pgx.Tx) error {
		now := s.now()
		var executionID string
		var notified int
		err := tx.QueryRow(ctx, releaseSQL, p.Scope.Org, p.Scope.Principal, p.Key, p.FencingToken, now,
			notifyPayload(p.Scope, p.Key)).Scan(&executionID, &notified)
		if errors.Is(err, pgx.ErrNoRows) {
			return idem.ErrFenced
		}
		if err != nil {
			return err
		}
		fin := p.Finish
		fin.Org, fin.ExecutionID = p.Scope.Org, executionID
		return finishExecution(ctx, tx, fin, now)
	})
}

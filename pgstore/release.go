package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idem-run/idem"
)

// releaseSQL deletes a reservation still in flight under its fence and
// lease ($1 org, $2 principal, $3 key, $4 fencing token, $5 now) and
// signals a watched one on idem_completed ($6), so that waiters on other
// instances look again and find the key free.
const releaseSQL = `WITH gone AS (
		DELETE FROM idem_attempts
		WHERE org = $1 AND principal = $2 AND key = $3 AND fencing_token = $4
			AND state = 'in_flight' AND lease_expires_at > $5
		RETURNING execution_id, watched),
	notified AS (SELECT pg_notify('` + completedChannel + `', $6::text) FROM gone WHERE watched)
	SELECT execution_id, (SELECT count(*) FROM notified) FROM gone`

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

package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idem-run/idem"
)

// Release implements idem.AttemptStore: the fenced delete and the
// execution's finish, in one transaction.
func (s *Store) Release(ctx context.Context, p idem.ReleaseParams) error {
	return s.write(ctx, "release", func(ctx context.Context, tx txn, now time.Time) error {
		var executionID string
		err := tx.QueryRowContext(ctx, `DELETE FROM idem_attempts
			WHERE org = ? AND principal = ? AND key = ? AND fencing_token = ? AND state = 'in_flight' AND lease_expires_at > ?
			RETURNING execution_id`,
			p.Scope.Org, p.Scope.Principal, p.Key, p.FencingToken, micros(now)).Scan(&executionID)
		if errors.Is(err, sql.ErrNoRows) {
			return idem.ErrFenced
		}
		if err != nil {
			return err
		}
		fin := p.Finish
		fin.Org, fin.ExecutionID = p.Scope.Org, executionID
		return finishExecution(ctx, tx, now, fin)
	})
}

package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idem-run/idem"
)

// Release implements idem.AttemptStore: one fenced UPDATE gives up the key
// (held = 0; the row keeps its attempt columns as they were) and finishes
// the execution with its final events; a second gives back the approval
// the execution consumed when p.Finish.ReturnApproval names it.
func (s *Store) Release(ctx context.Context, p idem.ReleaseParams) error {
	return s.write(ctx, "release", func(ctx context.Context, tx txn, now time.Time) error {
		fin := p.Finish
		events, err := encodeEvents(fin.Events, now)
		if err != nil {
			return err
		}
		var id string
		err = tx.QueryRowContext(ctx, `UPDATE idem_records
			SET held = 0, outcome = ?6, code = ?7, attempts = ?8, finished_at = ?5, `+appendEventsSQL("?9")+`
			WHERE `+byKey+` AND fencing_token = ?4 AND state = 'in_flight' AND lease_expires_at > ?5
			RETURNING id`,
			p.Scope.Org, p.Scope.Principal, p.Key, p.FencingToken, micros(now),
			fin.Outcome, nullString(string(fin.Code)), fin.Attempts, events).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return idem.ErrFenced
		}
		if err != nil {
			return err
		}
		return returnApproval(ctx, tx, p.Scope.Org, fin.ReturnApproval, id)
	})
}

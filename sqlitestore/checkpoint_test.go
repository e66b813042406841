package sqlitestore

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-run/idem"
)

// The writer's commits never checkpoint the WAL (issue 36 item 4: a
// checkpoint in a commit made its whole group-commit batch wait): its
// connection's automatic checkpoint is off, and the checkpointer
// checkpoints every checkpointEvery write transactions, after the batch,
// so that the WAL stays small and starts again from the beginning.
func TestCommitsLeaveCheckpointsToTheCheckpointer(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var auto int
	if err := s.Write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&auto)
	}); err != nil {
		t.Fatal(err)
	}
	if auto != 0 {
		t.Errorf("the writer's wal_autocheckpoint is %d pages: its commits checkpoint", auto)
	}
	if err := s.Write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE app_rows (n INTEGER PRIMARY KEY, b BLOB)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// 1,000 write transactions of a page or more each, one at a time.
	const writes = 1000
	for i := range writes {
		if err := s.Write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO app_rows VALUES (?, randomblob(3000))`, i)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The checkpoints run off the commit path: wait for the last kicked.
	want := int64(writes/checkpointEvery) - 1
	for deadline := time.Now().Add(30 * time.Second); s.ckpt.runs.Load() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := s.ckpt.runs.Load(); got < want {
		t.Fatalf("%d checkpoints after %d write transactions, want at least %d", got, writes, want)
	}
	// The WAL holds the frames since its last restart, which follows a
	// complete checkpoint: far fewer than the writes wrote.
	var busy, frames, done int
	if err := s.r.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &done); err != nil {
		t.Fatal(err)
	}
	if frames >= 1000 {
		t.Errorf("the WAL holds %d frames after %d write transactions: the checkpointer does not keep it small", frames, writes)
	}
	t.Logf("%d checkpoints, %d frames in the WAL, %d checkpointed, busy %d", s.ckpt.runs.Load(), frames, done, busy)
}

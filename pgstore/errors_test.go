package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

var internal = &idem.Error{Code: idem.CodeInternal}

// A value PostgreSQL cannot hold that reaches the store anyway (input
// validation refuses it first) is a statement refused for its data:
// INTERNAL, naming the SQLSTATE, never STORE_UNAVAILABLE, which would tell
// the caller to retry an outage.
func TestRefusedDataIsInternalNotUnavailable(t *testing.T) {
	s, err := pgstore.Open(t.Context(), pgtest.NewDatabase(t), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	fp := strings.Repeat("1", 64)
	reserve := func(op, key string) error {
		_, err := s.Reserve(t.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: fmt.Sprintf("exe_%d", time.Now().UnixNano()), Scope: scope, Operation: op, Fingerprint: fp},
			Key:         key, Lease: time.Minute, Retention: time.Hour,
		})
		return err
	}
	approval := func(reason string) error {
		_, err := s.RequestApproval(t.Context(), idem.RequestApprovalParams{
			ID: fmt.Sprintf("apr_%d", time.Now().UnixNano()), Org: "acme", RequestedBy: "agent-1", Operation: "order.refund",
			Fingerprint: fp, Input: json.RawMessage(`{"amount":6000}`), Reason: reason, Expiry: time.Minute,
		})
		return err
	}
	for _, tc := range []struct {
		name     string
		call     func() error
		sqlstate string // in the message
	}{
		{"NUL in a text column", func() error { return reserve("order.refund\x00", "k-nul-op") }, "SQLSTATE 22021"},
		{"NUL in a key", func() error { return reserve("order.refund", "k\x00") }, "SQLSTATE 22021"},
		{"NUL in an approval reason", func() error { return approval("needs\x00approval") }, "SQLSTATE 22021"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, internal) {
				t.Fatalf("err = %v, want INTERNAL", err)
			}
			e := idem.AsError(err)
			if e.Retryable || !strings.Contains(e.Message, tc.sqlstate) || !strings.Contains(e.Message, "server bug") {
				t.Fatalf("INTERNAL error %+v: want not retryable, naming %s and a server bug", e, tc.sqlstate)
			}
		})
	}
	// The store still works: the failed batch left nothing behind.
	if err := reserve("order.refund", "k-after"); err != nil {
		t.Fatalf("reserve after the refused statements: %v", err)
	}
}

// Connection-level failures stay STORE_UNAVAILABLE; statements refused for
// their data are INTERNAL.
func TestInterpretErrorClasses(t *testing.T) {
	for _, tc := range []struct {
		code string
		want error
	}{
		{"08006", idem.ErrStoreUnavailable}, // connection_failure
		{"57P01", idem.ErrStoreUnavailable}, // admin_shutdown
		{"57P03", idem.ErrStoreUnavailable}, // cannot_connect_now
		{"53300", idem.ErrStoreUnavailable}, // too_many_connections
		{"40001", idem.ErrStoreUnavailable}, // serialization_failure, retries exhausted
		{"57014", idem.ErrStoreUnavailable}, // query_canceled (statement_timeout)
		{"22021", internal},                 // character_not_in_repertoire
		{"22P05", internal},                 // untranslatable_character
		{"22003", internal},                 // numeric_value_out_of_range
		{"23505", internal},                 // unique_violation not handled by the statement
		{"23502", internal},                 // not_null_violation
	} {
		err := pgstore.InterpretError(context.Background(), "op", fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: tc.code, Message: "m"}))
		if !errors.Is(err, tc.want) {
			t.Errorf("SQLSTATE %s: %v, want %v", tc.code, err, tc.want)
		}
	}
}

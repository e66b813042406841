package pgstore_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
)

// poolWith opens a pool on url whose sessions run with synchronous_commit
// set to mode (the test cluster of scripts/test.sh defaults to off).
func poolWith(t *testing.T, url, mode string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = mode
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// The test server is a lone primary: no standby streams from it, so the
// mode is standalone and, with synchronous_commit on, there is nothing to
// warn about; off is warned about whatever the replication.
func TestDurabilityReportLonePrimary(t *testing.T) {
	url := pgtest.NewDatabase(t)

	d, err := pgstore.DurabilityReport(t.Context(), poolWith(t, url, "on"))
	if err != nil {
		t.Fatal(err)
	}
	want := pgstore.Durability{SynchronousCommit: "on"}
	if d != want {
		t.Fatalf("lone primary, synchronous_commit on: got %+v, want %+v", d, want)
	}
	if d.Mode() != pgstore.ModeStandalone {
		t.Errorf("mode %q, want %q", d.Mode(), pgstore.ModeStandalone)
	}
	if w := d.Warning(); w != "" {
		t.Errorf("lone primary with synchronous_commit on: unexpected warning %q", w)
	}

	d, err = pgstore.DurabilityReport(t.Context(), poolWith(t, url, "off"))
	if err != nil {
		t.Fatal(err)
	}
	if d.SynchronousCommit != "off" || d.Standbys != 0 || d.Mode() != pgstore.ModeStandalone {
		t.Fatalf("synchronous_commit off: got %+v (mode %s)", d, d.Mode())
	}
	if w := d.Warning(); !strings.Contains(w, "synchronous_commit is off") || !strings.Contains(w, "run a second time for the same key") {
		t.Errorf("synchronous_commit off: warning %q does not say a reservation can be lost", w)
	}

	// The store's method reports its own pool's setting.
	s, err := pgstore.Open(t.Context(), url, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Durability(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got.SynchronousCommit == "" || got.InRecovery || got.Standbys != 0 {
		t.Errorf("Store.Durability: got %+v", got)
	}
}

func TestDurabilityModesAndWarnings(t *testing.T) {
	for _, c := range []struct {
		name string
		d    pgstore.Durability
		mode string
		warn []string // substrings; none means no warning
	}{
		{"lone primary", pgstore.Durability{SynchronousCommit: "on"}, pgstore.ModeStandalone, nil},
		{"lone primary, commit off", pgstore.Durability{SynchronousCommit: "off"}, pgstore.ModeStandalone,
			[]string{"synchronous_commit is off"}},
		{"async standby", pgstore.Durability{SynchronousCommit: "on", Standbys: 2}, pgstore.ModeAsynchronous,
			[]string{"2 standby(s) replicate asynchronously", "run twice for one key", "synchronous_standby_names"}},
		{"sync standby", pgstore.Durability{SynchronousCommit: "on", SynchronousStandbyNames: "ANY 1 (s1, s2)", Standbys: 2, SynchronousStandbys: 2},
			pgstore.ModeSynchronous, nil},
		{"sync standby, remote_apply", pgstore.Durability{SynchronousCommit: "remote_apply", SynchronousStandbyNames: "s1", Standbys: 1, SynchronousStandbys: 1},
			pgstore.ModeSynchronous, nil},
		{"sync standby named, commit local", pgstore.Durability{SynchronousCommit: "local", SynchronousStandbyNames: "s1", Standbys: 1, SynchronousStandbys: 1},
			pgstore.ModeAsynchronous, []string{"replicate asynchronously", `synchronous_commit "local"`}},
		{"sync standby named, commit off", pgstore.Durability{SynchronousCommit: "off", SynchronousStandbyNames: "s1", Standbys: 1, SynchronousStandbys: 1},
			pgstore.ModeAsynchronous, []string{"synchronous_commit is off", "replicate asynchronously"}},
		{"sync standby missing", pgstore.Durability{SynchronousCommit: "on", SynchronousStandbyNames: "s1"},
			pgstore.ModeSynchronousUnavailable, []string{"no synchronous standby is streaming", "stall"}},
		{"standby", pgstore.Durability{SynchronousCommit: "on", InRecovery: true}, pgstore.ModeStandby,
			[]string{"standby in recovery"}},
		{"unreadable", pgstore.Durability{SynchronousCommit: "on", Unreadable: 1}, pgstore.ModeAsynchronous,
			[]string{"pg_read_all_stats", "replicate asynchronously"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.d.Mode(); got != c.mode {
				t.Errorf("mode %q, want %q", got, c.mode)
			}
			w := c.d.Warning()
			if len(c.warn) == 0 && w != "" {
				t.Errorf("unexpected warning %q", w)
			}
			if len(c.warn) > 0 && w == "" {
				t.Errorf("no warning, want one mentioning %q", c.warn)
			}
			for _, s := range c.warn {
				if !strings.Contains(w, s) {
					t.Errorf("warning %q does not mention %q", w, s)
				}
			}
		})
	}
}

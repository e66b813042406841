package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/demo"
	"github.com/idem-run/idem/internal/pgtest"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/secretbox"
)

// Sharding readiness (docs/SCALE.md): a distributed PostgreSQL such as
// Citus, distributing every org table on org, needs org in every primary
// key and every unique constraint; routing by org needs it first in the
// primary key; and no table that holds org data may lack it.

// bookkeeping are the tables that hold no org data and stay on one node
// (the coordinator under Citus): the migration ledgers.
var bookkeeping = map[string]bool{
	"idem_schema_migrations":      true,
	"idem_demo_schema_migrations": true,
}

// wantOrgTables must all exist (and hold org data) once both schemas are
// migrated; partitions or tables added later are checked as well.
var wantOrgTables = []string{
	"idem_records", "idem_approvals", "idem_audit_events",
	"idem_demo_businesses", "idem_demo_backends", "idem_demo_webhooks", "idem_demo_webhook_deliveries",
	"idem_demo_tokens", "idem_demo_orders", "idem_demo_refunds", "idem_demo_gateway_effects",
	"idem_demo_subscriptions", "idem_demo_limits", "idem_demo_service_accounts", "idem_demo_agreements",
}

// knownViolations are violations found when this test was written and
// reported rather than fixed here (fixing them changes a schema). The test
// fails on any other violation, and when one of these is gone, so that
// the list only shrinks.
var knownViolations = map[string]bool{}

// relation is one table-like relation of the schema.
type relation struct {
	Name      string
	Kind      string // pg_class.relkind
	Partition bool
	OrgType   string // format_type of the org column, "" without one
	PKCols    []string
}

// uniqueIndex is one unique index (primary keys and UNIQUE constraints are
// backed by one) on a table of the schema.
type uniqueIndex struct {
	Table   string
	Index   string
	Primary bool
	Cols    []string // key columns in order; "(expression)" for an expression
}

func migratedBoth(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := t.Context()
	s, err := pgstore.Open(ctx, url, idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	box, err := secretbox.New(bytes.Repeat([]byte{7}, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	app, err := demo.Open(ctx, url, demo.Config{Sealer: box})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestShardingReadiness(t *testing.T) {
	pool := migratedBoth(t)
	violations, orgTables, classified := shardingViolations(t, pool)
	t.Logf("relations:\n  %s", strings.Join(classified, "\n  "))
	for _, name := range wantOrgTables {
		if !orgTables[name] {
			t.Errorf("table %s: missing, or not classified as an org table", name)
		}
	}
	for _, v := range violations {
		if knownViolations[v] {
			t.Logf("known violation (reported, schema unchanged): %s", v)
			continue
		}
		t.Errorf("sharding violation: %s", v)
	}
	for v := range knownViolations {
		if !slices.Contains(violations, v) {
			t.Errorf("known violation %q is gone: remove it from knownViolations and docs/SCALE.md", v)
		}
	}
}

// The check finds each kind of violation it looks for.
func TestShardingReadinessDetectsViolations(t *testing.T) {
	pool := migratedBoth(t)
	for _, ddl := range []string{
		`CREATE TABLE idem_probe_no_org (id text PRIMARY KEY)`,
		`CREATE TABLE idem_probe_org_second (id text, org text, PRIMARY KEY (id, org))`,
		`CREATE TABLE idem_probe_no_pk (org text, id text)`,
		`CREATE TABLE idem_probe_int_org (org bigint PRIMARY KEY)`,
		`CREATE UNIQUE INDEX idem_probe_orders_id ON idem_demo_orders (id) WHERE amount < 0`,
		`ALTER TABLE idem_demo_limits ADD CONSTRAINT idem_probe_limits_subject UNIQUE (subject, subscription_id)`,
	} {
		if _, err := pool.Exec(t.Context(), ddl); err != nil {
			t.Fatalf("%s: %v", ddl, err)
		}
	}
	violations, _, _ := shardingViolations(t, pool)
	want := []string{
		"idem_demo_limits: unique index idem_probe_limits_subject (subject, subscription_id) does not include org",
		"idem_demo_orders: unique index idem_probe_orders_id (id) does not include org",
		"idem_probe_no_org: holds rows but has no org column (relkind r)",
		"idem_probe_no_pk: has no primary key",
		"idem_probe_org_second: primary key (id, org) does not start with org",
	}
	got := slices.DeleteFunc(slices.Clone(violations), func(v string) bool { return strings.HasPrefix(v, "org columns differ in type") })
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n  %s\nwant:\n  %s", strings.Join(violations, "\n  "), strings.Join(want, "\n  "))
	}
	if !slices.ContainsFunc(violations, func(v string) bool {
		return strings.HasPrefix(v, "org columns differ in type") && strings.Contains(v, "idem_probe_int_org")
	}) {
		t.Errorf("a bigint org column is not reported: %v", violations)
	}
}

// shardingViolations inspects the catalog of pool's database: it returns
// the violations, sorted, the org tables, and a line per relation saying
// how it was classified.
func shardingViolations(t *testing.T, pool *pgxpool.Pool) (violations []string, orgTables map[string]bool, classified []string) {
	t.Helper()
	ctx := t.Context()

	// Every relation of the schema that can hold rows: tables, partitioned
	// tables, materialized views, foreign tables. Sequences (the fencing
	// tokens, identity columns) and indexes hold no org data.
	rows, err := pool.Query(ctx, `
		SELECT c.relname, c.relkind::text, c.relispartition,
			COALESCE((SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
				WHERE a.attrelid = c.oid AND a.attname = 'org' AND NOT a.attisdropped), ''),
			COALESCE((SELECT array_agg(a.attname ORDER BY k.n)
				FROM pg_index ix, unnest(ix.indkey) WITH ORDINALITY k(attnum, n), pg_attribute a
				WHERE ix.indrelid = c.oid AND ix.indisprimary AND a.attrelid = c.oid AND a.attnum = k.attnum), '{}')
		FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'm', 'f')
		ORDER BY c.relname`)
	if err != nil {
		t.Fatal(err)
	}
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[relation])
	if err != nil {
		t.Fatal(err)
	}

	rows, err = pool.Query(ctx, `
		SELECT c.relname, i.relname, ix.indisprimary,
			array(SELECT COALESCE(a.attname, '(expression)')
				FROM unnest(ix.indkey) WITH ORDINALITY k(attnum, n)
				LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
				WHERE k.n <= ix.indnkeyatts ORDER BY k.n)
		FROM pg_index ix
		JOIN pg_class c ON c.oid = ix.indrelid
		JOIN pg_class i ON i.oid = ix.indexrelid
		WHERE ix.indisunique AND c.relnamespace = current_schema()::regnamespace
		ORDER BY c.relname, i.relname`)
	if err != nil {
		t.Fatal(err)
	}
	uniques, err := pgx.CollectRows(rows, pgx.RowToStructByPos[uniqueIndex])
	if err != nil {
		t.Fatal(err)
	}

	// Exclusion constraints must include the distribution column too.
	rows, err = pool.Query(ctx, `
		SELECT c.relname || ': exclusion constraint ' || x.conname
		FROM pg_constraint x JOIN pg_class c ON c.oid = x.conrelid
		WHERE x.contype = 'x' AND c.relnamespace = current_schema()::regnamespace
			AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org'
				AND a.attnum = ANY (x.conkey))`)
	if err != nil {
		t.Fatal(err)
	}
	violations, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for i := range violations {
		violations[i] += " does not include org"
	}

	orgTables = map[string]bool{}
	orgTypes := map[string][]string{}
	for _, r := range rels {
		switch {
		case bookkeeping[r.Name]:
			classified = append(classified, r.Name+": bookkeeping (exempt)")
			if r.OrgType != "" {
				violations = append(violations, r.Name+": listed as bookkeeping but has an org column")
			}
			continue
		case r.OrgType == "":
			violations = append(violations, fmt.Sprintf("%s: holds rows but has no org column (relkind %s)", r.Name, r.Kind))
			continue
		}
		orgTables[r.Name] = true
		orgTypes[r.OrgType] = append(orgTypes[r.OrgType], r.Name)
		kind := "org table"
		if r.Partition {
			kind = "org table (partition)"
		}
		classified = append(classified, fmt.Sprintf("%s: %s, primary key (%s)", r.Name, kind, strings.Join(r.PKCols, ", ")))
		switch {
		case len(r.PKCols) == 0:
			violations = append(violations, r.Name+": has no primary key")
		case r.PKCols[0] != "org":
			violations = append(violations, fmt.Sprintf("%s: primary key (%s) does not start with org", r.Name, strings.Join(r.PKCols, ", ")))
		}
	}
	for _, u := range uniques {
		if !orgTables[u.Table] || slices.Contains(u.Cols, "org") {
			continue
		}
		what := "unique index"
		if u.Primary {
			what = "primary key"
		}
		violations = append(violations, fmt.Sprintf("%s: %s %s (%s) does not include org", u.Table, what, u.Index, strings.Join(u.Cols, ", ")))
	}
	// Colocated distributed tables need one distribution column type.
	if len(orgTypes) > 1 {
		violations = append(violations, fmt.Sprintf("org columns differ in type: %v", orgTypes))
	}
	sort.Strings(violations)
	return violations, orgTables, classified
}

// idem serve on PostgreSQL logs the database's durability at start-up and
// warns when a reservation could be lost (the test cluster of
// scripts/test.sh runs with synchronous_commit = off).
func TestServeReportsStoreDurability(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s := serve(t, url, t.TempDir())
	var info, warn map[string]any
	for _, line := range strings.Split(s.logs(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "store durability" {
			continue
		}
		switch rec["level"] {
		case "INFO":
			info = rec
		case "WARN":
			warn = rec
		}
	}
	if info == nil {
		t.Fatalf("no store durability line in the log:\n%s", s.logs())
	}
	if info["mode"] != pgstore.ModeStandalone || info["standbys"] != float64(0) || info["synchronousCommit"] == "" {
		t.Errorf("store durability = %v, want a standalone primary", info)
	}
	offWarned := warn != nil && strings.Contains(fmt.Sprint(warn["warning"]), "synchronous_commit is off")
	if (info["synchronousCommit"] == "off") != offWarned {
		t.Errorf("synchronousCommit %v, warning %v", info["synchronousCommit"], warn)
	}
}

package main

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Counts per request (issue 36 item 6), beside the rates: what a request
// cost the store and the server in events that do not depend on how busy
// the machine is, so that they can be read on a shared machine too.

// serverCounts are the counters idem's /metrics exposes that a phase
// reads: the store calls (every method, idem_store_duration_seconds's
// count) and the Go heap allocations (go_memstats_mallocs_total, and
// their bytes, go_memstats_alloc_bytes_total) of every server. ok is
// false when a server has no /metrics (the floor); memstats, when every
// server gave both heap figures.
type serverCounts struct {
	storeCalls, mallocs, allocBytes float64
	// writeTx and writeCalls are the group-commit counters: the store's
	// write transactions and the write calls they carried.
	writeTx, writeCalls float64
	// cacheHits and cacheMisses are the replay cache's counters: final
	// records answered from memory, and read from the store.
	cacheHits, cacheMisses float64
	ok, memstats           bool
}

// scrapeCounts reads serverCounts from the /metrics of each server at base
// URLs urls, once each.
func scrapeCounts(ctx context.Context, c *http.Client, urls []string) serverCounts {
	out := serverCounts{ok: len(urls) > 0, memstats: len(urls) > 0}
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/metrics", nil)
		if err != nil {
			return serverCounts{}
		}
		resp, err := c.Do(req)
		if err != nil {
			return serverCounts{}
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return serverCounts{}
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var mallocs, bytes bool
		for sc.Scan() {
			line := sc.Text()
			name, value, ok := metricLine(line)
			switch {
			case !ok:
			case name == "idem_store_duration_seconds_count":
				out.storeCalls += value
			case name == "go_memstats_mallocs_total":
				out.mallocs += value
				mallocs = true
			case name == "go_memstats_alloc_bytes_total":
				out.allocBytes += value
				bytes = true
			case name == "idem_store_write_transactions_total":
				out.writeTx += value
			case name == "idem_store_write_calls_total":
				out.writeCalls += value
			case name == "idem_replay_cache_hits_total":
				out.cacheHits += value
			case name == "idem_replay_cache_misses_total":
				out.cacheMisses += value
			}
		}
		resp.Body.Close()
		out.memstats = out.memstats && mallocs && bytes
	}
	return out
}

// metricLine splits a Prometheus text line into its metric name (labels
// dropped) and value; comments are not ok.
func metricLine(line string) (string, float64, bool) {
	if line == "" || line[0] == '#' {
		return "", 0, false
	}
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return "", 0, false
	}
	name := line[:i]
	if j := strings.IndexByte(name, '{'); j >= 0 {
		name = name[:j]
	}
	return name, v, true
}

// pgCounts are PostgreSQL's counters a phase reads: the sequential scans of
// idem's tables and the rows they read (pg_stat_user_tables; each backend
// reports its own at most once a second, and an idle one later, so a
// phase's count may include earlier scans: the migrations' index builds
// on the empty tables, which read no row, show up so) and the statements
// the database ran (pg_stat_statements, when the cluster loads it).
// statements is -1 when unknown.
type pgCounts struct {
	seqScans, seqRows, statements int64
	ok                            bool
}

// samplePGCounts reads pgCounts of conn's database.
func samplePGCounts(ctx context.Context, conn *pgx.Conn) pgCounts {
	var c pgCounts
	if err := conn.QueryRow(ctx, `SELECT COALESCE(sum(seq_scan), 0)::int8, COALESCE(sum(seq_tup_read), 0)::int8 FROM pg_stat_user_tables
		WHERE relname IN ('idem_records', 'idem_audit_events', 'idem_approvals')`).Scan(&c.seqScans, &c.seqRows); err != nil {
		return pgCounts{}
	}
	c.ok = true
	if err := conn.QueryRow(ctx, `SELECT COALESCE(sum(calls), 0)::int8 FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&c.statements); err != nil {
		c.statements = -1
	}
	return c
}

// enableStatements makes pg_stat_statements readable in conn's database,
// if the cluster loads it (the throwaway cluster does, see pg.go), and
// keeps conn's own reads of idem's tables (storedBodyBytes) off
// sequential scans, so that the harness adds none to the phases' counts.
func enableStatements(ctx context.Context, conn *pgx.Conn) {
	_, _ = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	_, _ = conn.Exec(ctx, `SET enable_seqscan = off`)
}

// addCounts fills r's counts per request from samples around it.
func addCounts(r *Row, sb, sa serverCounts, pb, pa pgCounts) {
	if r.Requests == 0 {
		return
	}
	n := float64(r.Requests)
	if sb.ok && sa.ok {
		r.StoreCallsPerReq = (sa.storeCalls - sb.storeCalls) / n
		r.AllocsPerReq = (sa.mallocs - sb.mallocs) / n
		if h, m := sa.cacheHits-sb.cacheHits, sa.cacheMisses-sb.cacheMisses; h+m > 0 {
			ratio := h / (h + m)
			r.CacheHitRatio = &ratio
		}
	}
	if pb.ok && pa.ok {
		v, rows := float64(pa.seqScans-pb.seqScans)/n, float64(pa.seqRows-pb.seqRows)/n
		r.SeqScansPerReq, r.SeqRowsPerReq = &v, &rows
		if pb.statements >= 0 && pa.statements >= 0 {
			s := float64(pa.statements-pb.statements) / n
			r.StatementsPerReq = &s
		}
	}
}

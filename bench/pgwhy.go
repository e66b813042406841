package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// What explains a PostgreSQL phase's cost (issue 36): checkpoints and
// full-page images written during it, the shared buffers its statements
// touched, its statements by time, and what the busy backends waited on.

// pgWhy is a snapshot of the cluster's cumulative counters.
type pgWhy struct {
	checkpoints int64 // pg_stat_bgwriter: timed + requested
	fpi         int64 // pg_stat_wal.wal_fpi: full-page images
	autovacuums int64 // pg_stat_user_tables: autovacuum + autoanalyze runs of idem's tables
	stmts       map[int64]stmtStat
	ok          bool
}

type stmtStat struct {
	query  string
	calls  int64
	ms     float64
	blocks int64 // shared blocks hit + read
}

// topStatements is how many statements a phase's explanation lists
// (--pg-statements; 0: all).
var topStatements = 5

// StatementCost is one statement's share of a phase (pg_stat_statements).
type StatementCost struct {
	Query         string  `json:"query"`
	CallsPerReq   float64 `json:"callsPerRequest"`
	MsPerCall     float64 `json:"msPerCall"`
	BlocksPerCall float64 `json:"sharedBlocksPerCall"`
}

func samplePGWhy(ctx context.Context, conn *pgx.Conn) pgWhy {
	w := pgWhy{stmts: map[int64]stmtStat{}}
	if err := conn.QueryRow(ctx, `SELECT (checkpoints_timed + checkpoints_req)::int8 FROM pg_stat_bgwriter`).Scan(&w.checkpoints); err != nil {
		return pgWhy{}
	}
	_ = conn.QueryRow(ctx, `SELECT wal_fpi::int8 FROM pg_stat_wal`).Scan(&w.fpi)
	_ = conn.QueryRow(ctx, `SELECT COALESCE(sum(autovacuum_count + autoanalyze_count), 0)::int8 FROM pg_stat_user_tables
		WHERE relname LIKE 'idem_%'`).Scan(&w.autovacuums)
	rows, err := conn.Query(ctx, `SELECT queryid, calls, total_exec_time, shared_blks_hit + shared_blks_read, query
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND queryid IS NOT NULL`)
	if err == nil {
		for rows.Next() {
			var id int64
			var s stmtStat
			if rows.Scan(&id, &s.calls, &s.ms, &s.blocks, &s.query) == nil {
				w.stmts[id] = s
			}
		}
		rows.Close()
	}
	w.ok = true
	return w
}

// addWhy fills r's explanation from two snapshots around it and the wait
// events sampled during it.
func addWhy(r *Row, b, a pgWhy, waits map[string]int) {
	if !b.ok || !a.ok || r.Requests == 0 {
		return
	}
	n := float64(r.Requests)
	r.Checkpoints = a.checkpoints - b.checkpoints
	r.FPIPerReq = float64(a.fpi-b.fpi) / n
	r.Autovacuums = a.autovacuums - b.autovacuums
	var blocks int64
	var top []StatementCost
	for id, s := range a.stmts {
		p := b.stmts[id]
		calls := s.calls - p.calls
		if calls <= 0 {
			continue
		}
		blocks += s.blocks - p.blocks
		top = append(top, StatementCost{
			Query:         oneLine(s.query, 90),
			CallsPerReq:   float64(calls) / n,
			MsPerCall:     (s.ms - p.ms) / float64(calls),
			BlocksPerCall: float64(s.blocks-p.blocks) / float64(calls),
		})
	}
	r.BlocksPerReq = float64(blocks) / n
	sort.Slice(top, func(i, j int) bool {
		return top[i].MsPerCall*top[i].CallsPerReq > top[j].MsPerCall*top[j].CallsPerReq
	})
	if topStatements > 0 && len(top) > topStatements {
		top = top[:topStatements]
	}
	r.TopStatements = top
	r.WaitEvents = waits
}

func oneLine(q string, max int) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > max {
		q = q[:max] + "…"
	}
	return q
}

// waitSampler samples, every 10 ms until stopped, what the active backends
// of the database (other than its own) wait on: "CPU" when on no event.
// The counts are samples of backends, not time.
type waitSampler struct {
	stop chan struct{}
	done chan map[string]int
}

func sampleWaits(ctx context.Context, url string) *waitSampler {
	s := &waitSampler{stop: make(chan struct{}), done: make(chan map[string]int, 1)}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		s.done <- nil
		return s
	}
	go func() {
		defer conn.Close(context.Background())
		counts := map[string]int{}
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var mu sync.Mutex
		for {
			select {
			case <-s.stop:
				mu.Lock()
				s.done <- counts
				mu.Unlock()
				return
			case <-t.C:
			}
			rows, err := conn.Query(ctx, `SELECT COALESCE(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
				WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()`)
			if err != nil {
				continue
			}
			for rows.Next() {
				var ev string
				if rows.Scan(&ev) == nil {
					counts[ev]++
				}
			}
			rows.Close()
		}
	}()
	return s
}

func (s *waitSampler) result() map[string]int {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	return <-s.done
}

// whyLine is a row's explanation in one line, for the progress output.
func whyLine(r Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: checkpoints %d, full-page images/req %.2f, autovacuum runs %d, shared blocks/req %.1f", r.Phase, r.Checkpoints, r.FPIPerReq, r.Autovacuums, r.BlocksPerReq)
	for _, t := range r.TopStatements {
		fmt.Fprintf(&b, "\n    %.2f/req × %.3f ms, %.1f blocks: %s", t.CallsPerReq, t.MsPerCall, t.BlocksPerCall, t.Query)
	}
	type kv struct {
		k string
		v int
	}
	var w []kv
	total := 0
	for k, v := range r.WaitEvents {
		w = append(w, kv{k, v})
		total += v
	}
	sort.Slice(w, func(i, j int) bool { return w[i].v > w[j].v })
	if total > 0 {
		b.WriteString("\n    waits:")
		for i, x := range w {
			if i == 6 {
				break
			}
			fmt.Fprintf(&b, " %s %.0f%%", x.k, 100*float64(x.v)/float64(total))
		}
	}
	return b.String()
}

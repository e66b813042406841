package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// StoreResult is every measurement on one store configuration.
type StoreResult struct {
	Store     string      `json:"store"` // sqlite, pg, pg2
	Instances int         `json:"instances"`
	Rows      []Row       `json:"rows"`
	Storm     stormResult `json:"storm"`
	StormWait stormResult `json:"stormWait"`
}

// Row is one load phase of one store.
type Row struct {
	Phase       string  `json:"phase"` // ceiling, first, replay, raw
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"firstError,omitempty"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"perSecond"`
	P50Ms       float64 `json:"p50Ms"`
	P99Ms       float64 `json:"p99Ms"`
	P999Ms      float64 `json:"p999Ms"`
	CPUPerReqUs float64 `json:"serverCpuPerRequestUs,omitempty"`
	RSSMB       float64 `json:"serverRssMB,omitempty"`
	BytesPerKey float64 `json:"bytesPerRetainedKey,omitempty"`
	VsCeiling   float64 `json:"ratioToCeiling,omitempty"`
	VsRaw       float64 `json:"ratioToRawLimit,omitempty"`
	// VsFloor is the row's rate over the floor's (floor.go): the minimal
	// durable keyed handler on the same database.
	VsFloor float64 `json:"ratioToFloor,omitempty"`
	// AddedP99Ms is, on the first@half row, its p99 minus the p99 of the
	// ceiling at the same paced rate: the latency the idempotency layer adds.
	AddedP99Ms float64 `json:"addedP99Ms,omitempty"`
	// OverFloorP99Ms is, on the first@half row, its p99 minus the p99 of
	// the floor at the same paced rate (floor@half): the part of the tail
	// that is idem's, not the durable commit's own.
	OverFloorP99Ms float64 `json:"addedOverFloorP99Ms,omitempty"`
	// PacedAt is the target rate of a paced phase (half the peak keyed rate).
	PacedAt float64 `json:"pacedAtPerSecond,omitempty"`
	// Database and load-generator cost per request (PostgreSQL; dbstat.go):
	// the cluster's CPU (only when the harness started it), the harness's
	// own CPU, write transactions committed, WAL bytes written and growth of
	// the database on disk (every table: attempts, executions, audit events,
	// the demo's rows).
	DBCPUPerReqUs   float64 `json:"dbCpuPerRequestUs,omitempty"`
	LoadCPUPerReqUs float64 `json:"loadCpuPerRequestUs,omitempty"`
	DBWriteTxPerReq float64 `json:"dbWriteTxPerRequest,omitempty"`
	WALBytesPerReq  float64 `json:"walBytesPerRequest,omitempty"`
	DBGrowthPerReq  float64 `json:"dbGrowthBytesPerRequest,omitempty"`
	// MachineCPUs is the cores the whole machine kept busy during the phase,
	// everyone's work included (/proc/stat).
	MachineCPUs float64 `json:"machineCpusBusy,omitempty"`
	// StoredBodyBytes (first, PostgreSQL) is the mean stored answer (headers
	// and body) of a completed attempt record, part of BytesPerKey.
	StoredBodyBytes float64 `json:"storedAnswerBytesPerKey,omitempty"`
	// Counts per request (counts.go): idem's store calls and the server's
	// heap allocations (from its /metrics; idem's phases only), and on
	// PostgreSQL the sequential scans of idem's tables, the rows they
	// read, and the statements the database ran (nil: not measured).
	StoreCallsPerReq float64  `json:"storeCallsPerRequest,omitempty"`
	AllocsPerReq     float64  `json:"serverAllocsPerRequest,omitempty"`
	SeqScansPerReq   *float64 `json:"seqScansPerRequest,omitempty"`
	SeqRowsPerReq    *float64 `json:"seqScanRowsPerRequest,omitempty"`
	StatementsPerReq *float64 `json:"statementsPerRequest,omitempty"`
	// CacheHitRatio is the share of the final records the servers found
	// that their replay caches held (idem_replay_cache_hits_total over
	// hits and misses); nil when no record was found (first executions).
	CacheHitRatio *float64 `json:"replayCacheHitRatio,omitempty"`
	// What explains a PostgreSQL phase's cost (pgwhy.go): checkpoints,
	// full-page images and autovacuum/autoanalyze runs of idem's tables
	// during it, shared buffers its statements touched per request, its
	// costliest statements and its backends' sampled wait events.
	Checkpoints   int64           `json:"checkpoints,omitempty"`
	FPIPerReq     float64         `json:"fullPageImagesPerRequest,omitempty"`
	Autovacuums   int64           `json:"autovacuumRuns,omitempty"`
	BlocksPerReq  float64         `json:"sharedBlocksPerRequest,omitempty"`
	TopStatements []StatementCost `json:"topStatements,omitempty"`
	WaitEvents    map[string]int  `json:"waitEventSamples,omitempty"`
}

func newRow(name string, p phase) Row {
	return Row{
		Phase: name, Requests: p.requests, Errors: p.errors, FirstError: p.firstErr,
		Seconds: p.elapsed.Seconds(), PerSecond: p.rate(),
		P50Ms: ms(quantile(p.lat, 0.5)), P99Ms: ms(quantile(p.lat, 0.99)), P999Ms: ms(quantile(p.lat, 0.999)),
	}
}

// benchStore starts the server(s) for one store configuration, runs every
// phase, stops them and measures the raw limit on the same database.
func benchStore(ctx context.Context, o options, name, tmp, pgAdmin string) (StoreResult, error) {
	sr := StoreResult{Store: name, Instances: 1}
	dir := filepath.Join(tmp, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sr, err
	}
	var storeURL, sqlitePath string
	switch name {
	case "sqlite":
		sqlitePath = filepath.Join(dir, "idem.db")
		storeURL = "sqlite:" + sqlitePath
	default:
		var err error
		if storeURL, err = createDatabase(ctx, pgAdmin, "idem_bench_"+name); err != nil {
			return sr, err
		}
		if o.pgParams != "" {
			sep := "?"
			if strings.Contains(storeURL, "?") {
				sep = "&"
			}
			storeURL += sep + o.pgParams
		}
		if name == "pg2" {
			sr.Instances = 2
		}
	}
	size := func() (int64, int64, error) {
		if sqlitePath != "" {
			return sqliteSize(ctx, sqlitePath)
		}
		return pgSize(ctx, storeURL)
	}

	progressf("%s: starting %d instance(s)", name, sr.Instances)
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for i := 0; i < sr.Instances; i++ {
		// The first instance migrates; later ones start after it.
		s, err := startServer(ctx, o.binary, storeURL, dir, o.serve)
		if err != nil {
			return sr, err
		}
		servers = append(servers, s)
	}
	if o.prefill > 0 {
		progressf("%s: prefilling %d completed attempt records", name, o.prefill)
		t0 := time.Now()
		var err error
		if sqlitePath != "" {
			err = prefillSQLite(ctx, sqlitePath, o.prefill)
		} else {
			err = prefillPostgres(ctx, storeURL, o.prefill)
		}
		if err != nil {
			return sr, err
		}
		progressf("%s: prefilled %d records in %.1fs", name, o.prefill, time.Since(t0).Seconds())
	}
	// stat samples the database around each phase (PostgreSQL only).
	var statConn *pgx.Conn
	if sqlitePath == "" {
		c, err := pgx.Connect(ctx, storeURL)
		if err != nil {
			return sr, err
		}
		defer c.Close(context.Background())
		statConn = c
		enableStatements(ctx, statConn)
	}
	stat := func() dbSample {
		if sqlitePath != "" {
			return loadSample()
		}
		return sampleDB(ctx, statConn, o.dbPID)
	}
	urls := func(path string) []string {
		var u []string
		for _, s := range servers {
			u = append(u, s.url+path)
		}
		return u
	}
	var measurePaced func(phaseName, label string, rate float64, do func(ctx context.Context, w, i int) error) Row
	client := newClient(o.clients)
	defer client.CloseIdleConnections()

	// measure runs one load phase and adds the server's CPU and RSS.
	measure := func(phaseName, label string, do func(ctx context.Context, w, i int) error) Row {
		return measurePaced(phaseName, label, 0, do)
	}
	// counts samples the counts per request (counts.go) around each phase.
	counts := func() (serverCounts, pgCounts) {
		var base []string
		for _, s := range servers {
			base = append(base, s.url)
		}
		sc := scrapeCounts(ctx, client, base)
		if statConn == nil {
			return sc, pgCounts{}
		}
		return sc, samplePGCounts(ctx, statConn)
	}
	measurePaced = func(phaseName, label string, rate float64, do func(ctx context.Context, w, i int) error) Row {
		scBefore, pgBefore := counts()
		var whyBefore pgWhy
		var waits *waitSampler
		if statConn != nil {
			whyBefore = samplePGWhy(ctx, statConn)
			waits = sampleWaits(ctx, storeURL)
		}
		before, dbBefore := procTotal(servers), stat()
		p := drivePaced(ctx, name+" "+label, o.clients, o.duration, rate, do)
		after, dbAfter := procTotal(servers), stat()
		scAfter, pgAfter := counts()
		var whyRow Row
		if statConn != nil {
			w := waits.result()
			whyRow.Requests = p.requests
			addWhy(&whyRow, whyBefore, samplePGWhy(ctx, statConn), w)
		}
		r := newRow(phaseName, p)
		addDB(&r, dbBefore, dbAfter)
		addCounts(&r, scBefore, scAfter, pgBefore, pgAfter)
		if p.requests > 0 {
			r.CPUPerReqUs = float64((after.cpu - before.cpu).Microseconds()) / float64(p.requests)
		}
		r.RSSMB = float64(after.rss) / (1 << 20)
		r.PacedAt = rate
		r.Checkpoints, r.FPIPerReq, r.Autovacuums = whyRow.Checkpoints, whyRow.FPIPerReq, whyRow.Autovacuums
		r.BlocksPerReq, r.TopStatements, r.WaitEvents = whyRow.BlocksPerReq, whyRow.TopStatements, whyRow.WaitEvents
		if statConn != nil {
			progressf("%s %s", name, whyLine(r))
		}
		return r
	}

	// Warm up connections and the server's code paths.
	ceiling := urls("/v1/demo/ceiling")
	businesses := urls("/v1/businesses")
	warm := o.duration / 4
	if warm > 2*time.Second {
		warm = 2 * time.Second
	}
	drive(ctx, name+" warm-up", o.clients, warm, func(ctx context.Context, w, i int) error {
		_, err := post(ctx, client, ceiling[(w+i)%len(ceiling)], "", "", body(fmt.Sprintf("warm-%d-%d", w, i)), false)
		return err
	})

	ceil := measure("ceiling", "ceiling", func(ctx context.Context, w, i int) error {
		r, err := post(ctx, client, ceiling[(w+i)%len(ceiling)], "", "", body(fmt.Sprintf("c-%d-%d", w, i)), false)
		return expect(r, err, 201, false)
	})
	sr.Rows = append(sr.Rows, ceil)

	size0, _, err := size()
	if err != nil {
		return sr, fmt.Errorf("store size: %w", err)
	}
	keys := make([][]string, o.clients)
	first := measure("first", "first executions", func(ctx context.Context, w, i int) error {
		k := fmt.Sprintf("f-%d-%d", w, i)
		r, err := post(ctx, client, businesses[(w+i)%len(businesses)], "bench-"+k, "", body(k), false)
		if err := expect(r, err, 201, false); err != nil {
			return err
		}
		keys[w] = append(keys[w], k)
		return nil
	})
	size1, rows, err := size()
	if err != nil {
		return sr, fmt.Errorf("store size: %w", err)
	}
	if first.Requests > 0 {
		if sqlitePath != "" {
			first.BytesPerKey = float64(size1-size0) / float64(first.Requests)
		} else if rows > 0 {
			first.BytesPerKey = float64(size1) / float64(rows)
			first.StoredBodyBytes = storedBodyBytes(ctx, statConn)
		}
	}
	sr.Rows = append(sr.Rows, first)

	// The same after warm-up: the first phase ran on a fresh store (never
	// analyzed, every connection's plans made on empty tables); this one
	// runs on the store it left.
	firstWarm := measure("first-warm", "first executions after warm-up", func(ctx context.Context, w, i int) error {
		k := fmt.Sprintf("fw-%d-%d", w, i)
		r, err := post(ctx, client, businesses[(w+i)%len(businesses)], "bench-"+k, "", body(k), false)
		return expect(r, err, 201, false)
	})
	sr.Rows = append(sr.Rows, firstWarm)

	// Two-phase first executions: business.create is transactional (one
	// commit); order.refund keeps two phases (reserve, the gateway and the
	// refund in the handler's own transaction, complete) because its
	// effect is at the gateway. One cent per request, each with its own
	// key, of an order no other request refunds (refundOrder), prepared
	// before the phase: the handler locks its order's row and answers the
	// order with its newest refunds, and a real workload's refunds are of
	// many orders, each with few refunds, not of 100 refunded by every
	// client in turn.
	orders := benchOrders(o.duration)
	progressf("%s: preparing %d orders for first-2p", name, orders)
	if err := prepareOrders(ctx, sqlitePath, storeURL, orders); err != nil {
		return sr, fmt.Errorf("prepare orders: %w", err)
	}
	bases := urls("")
	twoPhase := measure("first-2p", "first executions, two-phase", func(ctx context.Context, w, i int) error {
		k := fmt.Sprintf("r-%d-%d", w, i)
		url := fmt.Sprintf("%s/v1/orders/%s/refund", bases[(w+i)%len(bases)], refundOrder(orders, o.clients, w, i))
		r, err := post(ctx, client, url, "bench-"+k, "", []byte(`{"amount":1}`), false)
		return expect(r, err, 200, false)
	})
	sr.Rows = append(sr.Rows, twoPhase)

	var all []string
	for _, k := range keys {
		all = append(all, k...)
	}
	if len(all) == 0 {
		return sr, fmt.Errorf("no first execution succeeded: %s", first.FirstError)
	}
	replay := measure("replay", "replays", func(ctx context.Context, w, i int) error {
		own := keys[w]
		if len(own) == 0 {
			own = all
		}
		k := own[i%len(own)]
		r, err := post(ctx, client, businesses[(w+i)%len(businesses)], "bench-"+k, "", body(k), false)
		return expect(r, err, 201, true)
	})
	sr.Rows = append(sr.Rows, replay)
	// Replays of recent keys: each client's newest keys of first, few
	// enough for the replay cache to hold (the hit path, where replay,
	// cycling over every key of first, also measures the misses).
	recent := measure("replay-recent", "replays of recent keys", func(ctx context.Context, w, i int) error {
		own := keys[w]
		if len(own) == 0 {
			own = all
		}
		own = own[max(0, len(own)-recentKeys):]
		k := own[i%len(own)]
		r, err := post(ctx, client, businesses[(w+i)%len(businesses)], "bench-"+k, "", body(k), false)
		return expect(r, err, 201, true)
	})
	sr.Rows = append(sr.Rows, recent)

	// Added latency at half the peak keyed rate: the ceiling and first
	// executions paced at the same rate, p99 against p99.
	half := first.PerSecond / 2
	ceilHalf := measurePaced("ceiling@half", "ceiling at half the keyed peak", half, func(ctx context.Context, w, i int) error {
		r, err := post(ctx, client, ceiling[(w+i)%len(ceiling)], "", "", body(fmt.Sprintf("ch-%d-%d", w, i)), false)
		return expect(r, err, 201, false)
	})
	firstHalf := measurePaced("first@half", "first executions at half the peak", half, func(ctx context.Context, w, i int) error {
		k := fmt.Sprintf("h-%d-%d", w, i)
		r, err := post(ctx, client, businesses[(w+i)%len(businesses)], "bench-"+k, "", body(k), false)
		return expect(r, err, 201, false)
	})
	firstHalf.AddedP99Ms = firstHalf.P99Ms - ceilHalf.P99Ms
	sr.Rows = append(sr.Rows, ceilHalf, firstHalf)
	firstHalfAt := len(sr.Rows) - 1

	progressf("%s: same-key storm of %d, no wait", name, o.storm)
	sr.Storm = storm(ctx, businesses, o.storm, "bench-storm", body("storm"), false)
	progressf("%s: same-key storm of %d, Prefer: wait=5", name, o.storm)
	sr.StormWait = storm(ctx, businesses, o.storm, "bench-storm-wait", body("storm-wait"), true)

	for _, s := range servers {
		s.stop()
	}

	// The floor on the same database, as many processes as idem instances;
	// measure reads their CPU, and the deferred stop ends them on error.
	progressf("%s: starting the floor", name)
	servers = nil
	for i := 0; i < sr.Instances; i++ {
		f, err := startFloor(ctx, storeURL)
		if err != nil {
			return sr, err
		}
		servers = append(servers, f)
	}
	floorURLs := urls("/v1/businesses")
	drive(ctx, name+" floor warm-up", o.clients, warm, func(ctx context.Context, w, i int) error {
		k := fmt.Sprintf("flw-%d-%d", w, i)
		_, err := post(ctx, client, floorURLs[(w+i)%len(floorURLs)], "bench-"+k, "", body(k), false)
		return err
	})
	floor := measure("floor", "the floor", func(ctx context.Context, w, i int) error {
		k := fmt.Sprintf("fl-%d-%d", w, i)
		r, err := post(ctx, client, floorURLs[(w+i)%len(floorURLs)], "bench-"+k, "", body(k), false)
		return expect(r, err, 201, false)
	})
	// The floor paced as first@half was: how much of that row's tail is
	// the durable commit's own (fsync, the database's checkpoints) and how
	// much idem's.
	floorHalf := measurePaced("floor@half", "the floor at half the keyed peak", half, func(ctx context.Context, w, i int) error {
		k := fmt.Sprintf("flh-%d-%d", w, i)
		r, err := post(ctx, client, floorURLs[(w+i)%len(floorURLs)], "bench-"+k, "", body(k), false)
		return expect(r, err, 201, false)
	})
	sr.Rows = append(sr.Rows, floor, floorHalf)
	sr.Rows[firstHalfAt].OverFloorP99Ms = sr.Rows[firstHalfAt].P99Ms - floorHalf.P99Ms
	for _, s := range servers {
		s.stop()
	}
	servers = nil
	if err := dropFloorTables(ctx, storeURL); err != nil {
		return sr, fmt.Errorf("floor: %w", err)
	}

	var raw phase
	rawBefore := stat()
	if sqlitePath != "" {
		raw, err = rawSQLite(ctx, sqlitePath, o.clients, o.duration)
	} else {
		raw, err = rawPostgres(ctx, storeURL, o.clients, o.duration)
	}
	if err != nil {
		return sr, err
	}
	rawRow := newRow("raw", raw)
	addDB(&rawRow, rawBefore, stat())
	sr.Rows = append(sr.Rows, rawRow)

	for i := range sr.Rows {
		if ceil.PerSecond > 0 {
			sr.Rows[i].VsCeiling = sr.Rows[i].PerSecond / ceil.PerSecond
		}
		if rawRow.PerSecond > 0 {
			sr.Rows[i].VsRaw = sr.Rows[i].PerSecond / rawRow.PerSecond
		}
		if floor.PerSecond > 0 {
			sr.Rows[i].VsFloor = sr.Rows[i].PerSecond / floor.PerSecond
		}
	}
	return sr, nil
}

// recentKeys is how many of its newest keys of first each client replays
// in replay-recent.
const recentKeys = 100

// body is the business.create input for slug (also the ceiling's input).
func body(slug string) []byte {
	return []byte(`{"slug":"` + slug + `","name":"bench"}`)
}

// expect turns an unexpected answer into an error.
func expect(r reply, err error, status int, replayed bool) error {
	if err != nil {
		return err
	}
	if r.status != status || r.replayed != replayed {
		return fmt.Errorf("got %d (replayed %v), want %d (replayed %v): %.300s", r.status, r.replayed, status, replayed, r.body)
	}
	return nil
}

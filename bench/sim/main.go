// Command sim predicts, from one run of the benchmark harness, how many
// keyed executions per second 1 to 64 PostgreSQL shards hold and how much
// their retained attempt records take (docs/SCALE.md §7):
//
//	go run ./bench/sim --results bench/results/X.json --target 100000 --retention 24h
//
// The model. A shard is one primary (org-hash routed, or a Citus worker)
// with --db-cores cores (default: the measured machine's). Every request
// costs what the harness measured on the store given by --from (pg: one idem
// instance): idem instance CPU, PostgreSQL CPU (every process of the
// cluster) and write transactions; requests are first executions, or
// replays in the share --replays. A shard is bounded by the lower of
//
//   - database CPU: db-cores × 10⁶ / PostgreSQL µs per request;
//   - database commits: the raw limit's write transactions per second
//     (INSERT + UPDATE pairs), scaled by db-cores / measured cores (or
//     --commit-rate), divided by the write transactions per request.
//
// Group commit divides idem's own write transactions (first execution:
// Reserve, Complete, 2 without group commit; replay: the audit append) by
// the batching factor --batch, not the handler's; its default is what the
// results show, 2 / (measured write transactions − handler's), 1 before
// group commit. Database CPU per request is taken as measured at any batch.
//
// Every transaction touches one org, so n shards hold n times one shard:
// nothing crosses shards. Idem instances are stateless and any instance may
// serve any shard; each answers instance-cores × 10⁶ / idem µs per request.
// With --instances set, their total CPU caps the sum of the shards; without
// it the program reports how many are needed.
//
// Retained storage is first executions per second × retention × bytes per
// retained key (pg_total_relation_size of idem_records per key held, as
// measured), with the stored answer resized from the measured one to --body.
//
// The --check section compares the model with the harness's two instances
// on one PostgreSQL (store pg2): on the measured machine the server(s),
// PostgreSQL and the load generator share the cores with other work, so the
// one-box prediction is the cores left to them × 10⁶ / (idem + database +
// load generator µs per request), bounded by commits as above.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.results, "results", "", "harness results JSON (default: the newest bench/results/*.json that measured --from)")
	flag.StringVar(&o.from, "from", "pg", "store whose per-request costs the model uses: pg (one instance) or pg2 (two)")
	flag.Float64Var(&o.target, "target", 100000, "keyed requests per second to plan for")
	flag.DurationVar(&o.retention, "retention", 24*time.Hour, "how long attempt records are kept")
	flag.DurationVar(&o.auditRetention, "audit-retention", 7*24*time.Hour, "how long executions and audit events are kept (idem serve --audit-retention)")
	flag.Float64Var(&o.body, "body", 0, "stored answer (headers and body) bytes per key (default: as measured)")
	flag.Float64Var(&o.replays, "replays", 0, "share of requests that are replays of completed keys, 0 to 1")
	flag.Float64Var(&o.batch, "batch", 0, "group-commit batching factor of idem's write transactions (default: as measured)")
	flag.Float64Var(&o.handlerTx, "handler-tx", 0, "write transactions per first execution that are the handler's own, outside idem's (0: the demo's business.create writes in idem's transaction, one commit in all)")
	flag.Float64Var(&o.commitRate, "commit-rate", 0, "write transactions/s one primary commits (default: the raw limit's, × db-cores / measured cores)")
	flag.Float64Var(&o.dbCores, "db-cores", 0, "cores of each primary (default: the measured machine's)")
	flag.Float64Var(&o.instanceCores, "instance-cores", 0, "cores of each idem instance (default: the measured machine's)")
	flag.IntVar(&o.instances, "instances", 0, "idem instances in total (default: as many as needed)")
	flag.IntVar(&o.pool, "pool", 32, "PostgreSQL connections each instance's store pool holds per primary (pgstore.DefaultMaxConns)")
	flag.IntVar(&o.maxShards, "max-shards", 64, "largest shard count in the table")
	flag.BoolVar(&o.check, "check", true, "compare with the two-instance measurement (store pg2) when the file has it")
	flag.Parse()
	if err := run(os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(1)
	}
}

type options struct {
	results, from                     string
	target, body, replays, batch      float64
	handlerTx, dbCores, instanceCores float64
	commitRate                        float64
	retention, auditRetention         time.Duration
	instances, maxShards, pool        int
	check                             bool
}

func run(w io.Writer, o options) error {
	if o.results == "" {
		p, err := newestResults("bench/results", o.from)
		if err != nil {
			return err
		}
		o.results = p
	}
	if o.replays < 0 || o.replays > 1 || o.target <= 0 || o.retention <= 0 || o.maxShards < 1 {
		return fmt.Errorf("--replays must be in [0, 1], --target, --retention and --max-shards positive")
	}
	r, err := readResults(o.results)
	if err != nil {
		return err
	}
	s, ok, err := r.store(o.from)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s has no store %q: run go run ./bench --stores pg,pg2", o.results, o.from)
	}
	cores := float64(r.Machine.CPUs)
	if s.first.WriteTx <= o.handlerTx {
		return fmt.Errorf("--handler-tx %g: the first executions committed only %.2f write transactions each", o.handlerTx, s.first.WriteTx)
	}
	measuredBatch := 2 / (s.first.WriteTx - o.handlerTx)
	if o.batch == 0 {
		o.batch = measuredBatch
	}
	if o.dbCores == 0 {
		o.dbCores = cores
	}
	if o.instanceCores == 0 {
		o.instanceCores = cores
	}
	if o.body == 0 {
		o.body = s.first.StoredAnswer
	}
	m := Model{
		First: s.first.demand(), Replay: s.replay.demand(), ReplayFraction: o.replays,
		CommitRate: s.commitRate() * o.dbCores / cores, HandlerTx: o.handlerTx, Batch: o.batch / measuredBatch,
		DBCores: o.dbCores, Instances: o.instances, InstanceCores: o.instanceCores,
		BytesPerKey: s.first.BytesPerKey, MeasuredAnswer: s.first.StoredAnswer, Answer: o.body,
		Retention: o.retention,
	}
	if o.commitRate > 0 {
		m.CommitRate = o.commitRate
	}
	printModel(w, o, r, s, m, measuredBatch)
	if o.check {
		one, ok1, err1 := r.store("pg")
		two, ok2, err2 := r.store("pg2")
		if ok1 && ok2 && err1 == nil && err2 == nil {
			printCheck(w, cores, one, two, m)
		}
	}
	return nil
}

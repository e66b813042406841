package main

import (
	"math"
	"testing"
	"time"
)

// model is a shard with round numbers: 500 µs of database CPU and 3 write
// transactions (1 the handler's) per first execution, 10,000 commits/s,
// 250 µs of idem CPU, 2 cores everywhere.
func model() Model {
	return Model{
		First:      Demand{InstanceCPUUs: 250, DBCPUUs: 500, WriteTx: 3, WALBytes: 3000},
		Replay:     Demand{InstanceCPUUs: 100, DBCPUUs: 200, WriteTx: 1, WALBytes: 400},
		CommitRate: 10000, HandlerTx: 1, Batch: 1,
		DBCores: 2, InstanceCores: 2,
		BytesPerKey: 800, MeasuredAnswer: 300, Answer: 300,
		Retention: 24 * time.Hour,
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestShardBounds(t *testing.T) {
	m := model()
	b := m.ShardBounds()
	if !near(b[0].Rate, 4000) || !near(b[1].Rate, 10000.0/3) {
		t.Fatalf("bounds %v, want database CPU 4000, commits 3333.3", b)
	}
	if c := m.Capacity(1); c.Resource != "database commits" || !near(c.Rate, 10000.0/3) {
		t.Fatalf("capacity %v, want commits 3333.3", c)
	}
	// Batching idem's two transactions by 4: 2/4 + 1 = 1.5 per execution,
	// so commits allow 6,667/s and database CPU (4,000/s) binds.
	m.Batch = 4
	if c := m.Capacity(1); c.Resource != "database CPU" || !near(c.Rate, 4000) {
		t.Fatalf("batched capacity %v, want database CPU 4000", c)
	}
	if b := m.ShardBounds()[1]; !near(b.Rate, 10000/1.5) {
		t.Fatalf("batched commit bound %v, want 6666.7", b)
	}
	// Twice the cores: twice the CPU bound.
	m.DBCores = 4
	if c := m.Capacity(1); !near(c.Rate, 10000/1.5) || c.Resource != "database commits" {
		t.Fatalf("4-core capacity %v, want commits 6666.7", c)
	}
}

func TestShardsAddUpToTheInstanceBound(t *testing.T) {
	m := model()
	m.Instances = 10 // 10 × 2 cores / 250 µs = 80,000/s
	one := m.Capacity(1).Rate
	for n := 1; n <= 16; n *= 2 {
		c := m.Capacity(n)
		want := math.Min(float64(n)*one, 80000)
		if !near(c.Rate, want) {
			t.Errorf("%d shards: %.1f/s, want %.1f", n, c.Rate, want)
		}
		if n*2 <= 16 && float64(2*n)*one <= 80000 && !near(m.Capacity(2*n).Rate, 2*c.Rate) {
			t.Errorf("doubling %d shards did not double capacity", n)
		}
	}
	if c := m.Capacity(64); c.Resource != "idem instance CPU" || !near(c.Rate, 80000) {
		t.Errorf("64 shards: %v, want idem instance CPU 80000", c)
	}
	if n := m.ShardsFor(100000); n != 0 {
		t.Errorf("ShardsFor(100000) with 80,000/s of instances = %d, want 0", n)
	}
	m.Instances = 0
	if n := m.ShardsFor(100000); n != 30 { // 100,000 / 3,333.3
		t.Errorf("ShardsFor(100000) = %d, want 30", n)
	}
	if n := m.InstancesFor(100000); n != 13 { // 100,000 / 8,000
		t.Errorf("InstancesFor(100000) = %d, want 13", n)
	}
}

func TestStorage(t *testing.T) {
	m := model()
	if got, want := m.Storage(1000), 1000*86400*800.0; !near(got, want) {
		t.Fatalf("Storage(1000) = %g, want rate × retention × bytes/key = %g", got, want)
	}
	m.Answer = 1300 // 1,000 bytes more per stored answer
	if got, want := m.Storage(1000), 1000*86400*1800.0; !near(got, want) {
		t.Fatalf("Storage with 1300-byte answers = %g, want %g", got, want)
	}
	if got, want := m.WALPerSecond(1000), 1000*4000.0; !near(got, want) {
		t.Fatalf("WAL with 1300-byte answers = %g/s, want %g (the answer is written once more)", got, want)
	}
	m.ReplayFraction = 0.5 // replays retain no key
	if got, want := m.Storage(1000), 500*86400*1800.0; !near(got, want) {
		t.Fatalf("Storage with half replays = %g, want %g", got, want)
	}
}

func TestOneBox(t *testing.T) {
	d := Demand{InstanceCPUUs: 400, DBCPUUs: 500, LoadCPUUs: 100, WriteTx: 3}
	if b := OneBox(d, 2, 30000); b.Resource != "machine CPU" || !near(b.Rate, 2000) {
		t.Fatalf("OneBox = %v, want machine CPU 2000", b)
	}
	if b := OneBox(d, 2, 3000); b.Resource != "database commits" || !near(b.Rate, 1000) {
		t.Fatalf("OneBox = %v, want database commits 1000", b)
	}
}

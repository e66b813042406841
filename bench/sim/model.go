package main

import (
	"math"
	"time"
)

// Demand is what one request costs, as measured by the harness.
type Demand struct {
	InstanceCPUUs float64 // idem server CPU, µs
	DBCPUUs       float64 // PostgreSQL CPU (every process of the cluster), µs
	LoadCPUUs     float64 // the load generator's CPU, µs (one-box check only)
	WriteTx       float64 // write transactions committed
	WALBytes      float64 // WAL written
}

// Model is one shard's measured costs and the deployment to predict for.
type Model struct {
	First, Replay Demand
	// ReplayFraction of the requests are replays of completed keys; the rest
	// are first executions, each of which retains one key.
	ReplayFraction float64
	// CommitRate is the write transactions per second one primary commits.
	CommitRate float64
	// HandlerTx of First.WriteTx are the handler's own (the demo's row), which
	// group commit does not batch; the rest are idem's (Reserve, Complete).
	HandlerTx float64
	// Batch is the group-commit factor of idem's own write transactions,
	// relative to the measurement: 1 predicts the measured transactions.
	Batch float64
	// DBCores is each primary's cores.
	DBCores float64
	// Instances is the number of idem instances in total (0: as many as
	// needed), each with InstanceCores.
	Instances     int
	InstanceCores float64
	// BytesPerKey is what one retained key stores at an answer of
	// MeasuredAnswer bytes; Answer is the answer size to predict for.
	BytesPerKey, MeasuredAnswer, Answer float64
	Retention                           time.Duration
}

// mix is the demand of the average request.
func (m Model) mix() Demand {
	f := m.ReplayFraction
	b := m.Batch
	if b <= 0 {
		b = 1
	}
	idemTx := m.First.WriteTx - m.HandlerTx
	return Demand{
		InstanceCPUUs: (1-f)*m.First.InstanceCPUUs + f*m.Replay.InstanceCPUUs,
		DBCPUUs:       (1-f)*m.First.DBCPUUs + f*m.Replay.DBCPUUs,
		LoadCPUUs:     (1-f)*m.First.LoadCPUUs + f*m.Replay.LoadCPUUs,
		WriteTx:       (1-f)*(idemTx/b+m.HandlerTx) + f*m.Replay.WriteTx/b,
		WALBytes:      (1-f)*(m.First.WALBytes+m.Answer-m.MeasuredAnswer) + f*m.Replay.WALBytes,
	}
}

// Bound is one resource's limit on requests per second.
type Bound struct {
	Resource string
	Rate     float64
}

// ShardBounds are one primary's limits: its CPU and its commits.
func (m Model) ShardBounds() []Bound {
	d := m.mix()
	return []Bound{
		{"database CPU", m.DBCores * 1e6 / d.DBCPUUs},
		{"database commits", m.CommitRate / d.WriteTx},
	}
}

// InstanceRate is what one idem instance answers per second, CPU-bound.
func (m Model) InstanceRate() float64 {
	return m.InstanceCores * 1e6 / m.mix().InstanceCPUUs
}

// Capacity is the requests per second of shards primaries and the resource
// that bounds it: every transaction is one org's, so shards add up with no
// cross-shard cost, until the instances' CPU (if Instances is set) is spent.
func (m Model) Capacity(shards int) Bound {
	b := minBound(m.ShardBounds())
	b.Rate *= float64(shards)
	if m.Instances > 0 {
		if r := float64(m.Instances) * m.InstanceRate(); r < b.Rate {
			return Bound{"idem instance CPU", r}
		}
	}
	return b
}

// ShardsFor is the fewest shards that carry rate (0 if the instances cannot).
func (m Model) ShardsFor(rate float64) int {
	n := int(math.Ceil(rate / minBound(m.ShardBounds()).Rate))
	if m.Capacity(n).Rate < rate*(1-1e-9) {
		return 0
	}
	return n
}

// InstancesFor is the fewest idem instances whose CPU carries rate.
func (m Model) InstancesFor(rate float64) int {
	return int(math.Ceil(rate / m.InstanceRate()))
}

// KeyBytes is what one retained key stores at the Answer size.
func (m Model) KeyBytes() float64 {
	return m.BytesPerKey - m.MeasuredAnswer + m.Answer
}

// Storage is the bytes retained at rate requests per second: one key per
// first execution, kept for Retention.
func (m Model) Storage(rate float64) float64 {
	return rate * (1 - m.ReplayFraction) * m.Retention.Seconds() * m.KeyBytes()
}

// WALPerSecond is the WAL written (and shipped to standbys) at rate.
func (m Model) WALPerSecond(rate float64) float64 { return rate * m.mix().WALBytes }

// OneBox is the rate of one machine with cores shared by the server(s),
// PostgreSQL and the load generator, as the harness runs: the lower of its
// CPU (all three demands) and the primary's commits.
func OneBox(d Demand, cores, commitRate float64) Bound {
	return minBound([]Bound{
		{"machine CPU", cores * 1e6 / (d.InstanceCPUUs + d.DBCPUUs + d.LoadCPUUs)},
		{"database commits", commitRate / d.WriteTx},
	})
}

func minBound(bs []Bound) Bound {
	m := bs[0]
	for _, b := range bs[1:] {
		if b.Rate < m.Rate {
			m = b
		}
	}
	return m
}

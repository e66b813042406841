package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestRunReadsResults runs the program on a results file with round numbers:
// the shard's bounds are database CPU 2e6/800 = 2,500/s and commits
// 12,000/3 = 4,000/s; 100,000/s needs 40 shards; 24 h keep 100,000 × 86,400
// keys of 800 bytes (6.3 TiB).
func TestRunReadsResults(t *testing.T) {
	var out bytes.Buffer
	o := options{results: "testdata/results.json", from: "pg", target: 100000, retention: 24 * time.Hour,
		handlerTx: 1, maxShards: 64, pool: 32, check: true}
	if err := run(&out, o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"one shard, database CPU: 2500/s",
		"one shard, database commits: 4000/s",
		"**one shard holds 2500 keyed requests/s; bound: database CPU**",
		"Batching factor in the measurement: 1.00",
		"**shards needed: 40**",
		"**retained attempt records: 6.3 TiB** (8.64e+09 keys × 800 bytes)",
		"| 64 | 160000 | database CPU |",
		// pg2 phase: cores left 2 − (2 − 0.9 × 1.5) = 1.35; from 1-instance
		// costs 1.35e6 / 1400 = 964/s.
		"predicted from 1-instance costs and the cores left during pg2: 964/s",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunNeedsTheStore(t *testing.T) {
	o := options{results: "testdata/results.json", from: "sqlite", target: 1, retention: time.Hour, handlerTx: 1, maxShards: 1}
	if err := run(new(bytes.Buffer), o); err == nil || !strings.Contains(err.Error(), "no store") {
		t.Fatalf("run with a store the file lacks: %v", err)
	}
}

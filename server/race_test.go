//go:build race

package server_test

// raceAllocs is what the race detector adds to the allocations of a first
// execution: it makes sync.Pool drop a share of what it is given, at
// random, so the pools' objects are made again (about 20 more, measured).
const raceAllocs = 30

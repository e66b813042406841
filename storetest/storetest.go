// Package storetest is the conformance suite every idem.Store passes.
// Each store's tests call Run with a way to make a fresh database.
package storetest

import (
	"testing"

	"idem"
)

// Harness opens store instances on one fresh, empty database.
type Harness struct {
	// Open opens a new store instance on the database, with its own
	// connections, reading time from clock. The suite closes it.
	Open func(t *testing.T, clock idem.Clock) idem.Store
	// Break makes the database unreachable for every instance opened so
	// far, so that their calls fail.
	Break func(t *testing.T)
}

// Run runs the conformance suite. newDB is called once per subtest and
// must return a Harness on a database of its own.
func Run(t *testing.T, newDB func(t *testing.T) Harness) {
	t.Helper()
	// The cases are added in suite.go.
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newDB(t)) })
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, h Harness)
}

var cases []testCase

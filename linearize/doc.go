// Package linearize checks, with the porcupine linearizability checker,
// that the idempotency core behaves as one attempt record per (principal,
// key) under real concurrent HTTP traffic (SPEC §6). It holds only tests:
// the model of the attempt record, transactional operations (SPEC §6.7)
// included (model_test.go), a generator of concurrent histories against
// real servers (history_test.go) running the demo application and lin.put,
// a test-only transactional operation whose committed effects are checked
// too (linop_test.go), test-only broken stores that the checker must
// reject (broken_test.go), and the tests themselves (linearize_test.go). docs/RELIABILITY.md reports what
// they checked.
package linearize

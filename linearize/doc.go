// Package linearize checks, with the porcupine linearizability checker,
// that the idempotency core behaves as one attempt record per (principal,
// key) under real concurrent HTTP traffic (SPEC §6). It holds only tests:
//   - model_test.go: the model of the attempt record, with transactional
//     operations (SPEC §6.7, a failure rolls back and frees the key) and
//     raw operations (SPEC §15, a NotDispatched call frees the key);
//   - history_test.go: a generator of concurrent histories against real
//     servers running the demo application, lin.put and linRaw;
//   - linop_test.go: lin.put, a test-only transactional operation whose
//     committed effects are checked too;
//   - proxy_test.go: linRaw, the path of idem proxy: a raw operation built
//     by proxy.Build from an OpenAPI document and forwarded by
//     proxy.Forwarder to a stand-in upstream that records its effects and
//     answers 201, 409 or 500 or breaks the connection, while the
//     forwarder's transport refuses some requests before sending them
//     (NotDispatched); answers are read from their headers and checked
//     byte for byte against the upstream's, and the upstream's effects
//     against the history;
//   - broken_test.go (and noReleaseStore in proxy_test.go): test-only
//     broken stores that the checker must reject;
//   - linearize_test.go: the tests themselves.
//
// docs/RELIABILITY.md reports what they checked.
package linearize

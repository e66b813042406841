// Package idem makes retries of agent and automation calls safe and honest.
//
// A service declares each operation once (side-effect class, retry contract,
// timeout, approval policy). idem runs every call through one execution
// pipeline and enforces idempotency keys against a Store, so that a retried
// request either replays the original result, is refused with a clear code,
// or is answered as indeterminate — never silently executed twice.
//
// The root package holds the domain: operation metadata, retry contracts,
// principals, the error model and the Store interface. Subpackages wrap one
// dependency each: canonical (RFC 8785 JSON and request fingerprints),
// sqlitestore and pgstore (the two stores), storetest (their shared
// conformance suite).
package idem

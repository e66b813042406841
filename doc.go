// Package idem makes retries of agent and automation calls safe and honest.
//
// A service declares each operation once (side-effect class, retry contract,
// timeout, approval policy). idem runs every call through one execution
// pipeline and enforces idempotency keys against a Store, so that a retried
// request either replays the original result, is refused with a clear code,
// or is answered as indeterminate — never silently executed twice.
//
// The root package is the vocabulary the other packages share: operation
// metadata and retry contracts, Define and DefineRaw, the Registry,
// principals, the error model and its codes, attempt records, approvals and
// executions, the Store interface, the call a surface hands the engine
// (Invocation) and the answer it gets back (Result).
//
// The entry path is Define → NewRegistry → server.New (package server:
// the HTTP API, MCP and the console over one store), or pipeline.New for a
// runner called from Go alone. The other packages: pipeline (the engine),
// httpapi, mcpserver and webui (the surfaces), client (the Go client),
// sqlitestore and pgstore (the two stores) with storetest (their
// conformance suite), canonical (RFC 8785 JSON and request fingerprints),
// secretbox (sealed secret results), jwtauth (JWT bearer tokens), metrics
// (Prometheus), telemetry (OpenTelemetry from the environment), proxy (idem
// in front of an OpenAPI service), gateway (idem in front of MCP servers and
// HTTP APIs) with gatewayconfig (its config file),
// catalogdiff (catalog drift), webhooksig (webhook signatures), policyfile
// (policies and rate limits in configuration, CEL) and demo (the reference
// application).
package idem

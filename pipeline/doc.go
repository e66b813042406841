// Package pipeline is idem's engine: the one execution pipeline of SPEC §5
// that every surface calls. A surface parses its own transport into an
// idem.Invocation and renders the idem.Result it gets back; the Runner
// (New, Config) resolves the operation in an idem.Registry, checks the
// contract, validates the input, answers an existing attempt record,
// evaluates policies and approvals, reserves the key, runs the handler's
// attempts under their lease and timeout, and finalizes once, against an
// idem.Store. It also owns the background work of the pipeline (Start,
// Stop: the sweeper, the completion feed, the audit queue), admission
// control, the replay cache and tracing, and the system reads of the
// surfaces (approvals, executions, attempts), whose visibility rules live
// here and nowhere else.
//
// Files are named by stage, in stage order: pipeline.go (entry, resolve,
// reservation), pipeline_contract.go (stage 3), pipeline_input.go (4),
// pipeline_answer.go (5), pipeline_gate.go (6–7), pipeline_execute.go
// (10–11), pipeline_finalize.go (12) and pipeline_transact.go (8–12 in one
// transaction, SPEC §6.7).
package pipeline

package pipeline

import (
	"context"

	"github.com/idem-run/idem"
)

// checkContract applies the contract checks of SPEC §6.4 in order, and
// takes the call's key once they pass.
func (x *execution) checkContract() *idem.Error {
	m, key, dry := x.op.meta, x.inv.Key, x.inv.DryRun
	if !m.Retry.ReadsKey() {
		key = ""
	}
	if key != "" {
		if err := idem.ValidateKey(key); err != nil {
			return idem.AsError(err)
		}
		if e := idem.KeyWithDryRun(true, dry); e != nil {
			return e
		}
	}
	terms := termsOf(x.inv.Surface)
	switch {
	case dry && !m.Retry.Preview:
		return idem.Errorf(idem.CodeDryRunNotSupported, "operation %s has no preview (retry.preview is false); %s", m.Name, terms.noDryRun)
	case key != "" && m.Retry.Kind != idem.RetrySameKeyReplay:
		x.keyOutsideContract = key
		return idem.Errorf(idem.CodeIdempotencyKeyNotSupported, "operation %s is %s: it takes no %s; follow retry.kind in the catalog", m.Name, m.Retry.Kind, terms.key)
	case key == "" && !dry && m.Retry.Kind == idem.RetrySameKeyReplay && x.inv.Principal.MustSendKey():
		return idem.Errorf(idem.CodeIdempotencyKeyRequired, "operation %s replays by key: generate a key, record it in durable task state, and send it as %s", m.Name, terms.key)
	}
	x.key = key
	return nil
}

// keptRecord reports whether refused, the refusal of a key that the
// operation's contract takes no longer (IDEMPOTENCY_KEY_NOT_SUPPORTED),
// yields to a record that key already has for this operation: one made
// before a reload changed the contract. Such a record keeps answering
// its own request (stage 5: replay, 409, 410), and only it: the call
// goes on with the key, recordOnly, and is refused after all unless the
// record is of this exact intent (run). A new key is refused here as
// before, and nothing is ever reserved under one. A store that cannot be
// read leaves the refusal.
func (x *execution) keptRecord(ctx context.Context, refused *idem.Error) bool {
	key := x.keyOutsideContract
	if key == "" || refused.Code != idem.CodeIdempotencyKeyNotSupported {
		return false
	}
	a, err := x.readRecord(ctx, key)
	if err != nil || a.Operation != x.op.meta.Name {
		return false
	}
	x.key, x.recordOnly = key, refused
	return true
}

// refuseRecordOnly answers a recordOnly call whose intent is not its
// key's record's with the refusal of the contract, as a call without a
// record gets it.
func (x *execution) refuseRecordOnly() idem.Result {
	x.key = ""
	return x.fail(x.recordOnly)
}

// terms are how a surface's callers send the key and the dry run, for the
// messages that tell them what to do.
type terms struct{ key, noDryRun string }

// termsOf names the key and the dry run as surface s carries them: MCP
// tools take arguments, HTTP (and the CLI, which speaks it) headers and
// query parameters.
func termsOf(s idem.Surface) terms {
	if s == idem.SurfaceMCP {
		return terms{key: "the tool's idempotencyKey argument", noDryRun: "call the tool without the dryRun argument"}
	}
	return terms{key: "Idempotency-Key", noDryRun: "remove dryRun=true"}
}

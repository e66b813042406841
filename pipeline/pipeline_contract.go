package pipeline

import (
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
	switch {
	case dry && !m.Retry.Preview:
		return idem.Errorf(idem.CodeDryRunNotSupported, "operation %s has no preview (retry.preview is false); remove dryRun=true", m.Name)
	case key != "" && m.Retry.Kind != idem.RetrySameKeyReplay:
		return idem.Errorf(idem.CodeIdempotencyKeyNotSupported, "operation %s is %s: it takes no Idempotency-Key; follow retry.kind in the catalog", m.Name, m.Retry.Kind)
	case key == "" && !dry && m.Retry.Kind == idem.RetrySameKeyReplay && x.inv.Principal.MustSendKey():
		return idem.Errorf(idem.CodeIdempotencyKeyRequired, "operation %s replays by key: generate a key, record it in durable task state, and send it as Idempotency-Key", m.Name)
	}
	x.key = key
	return nil
}

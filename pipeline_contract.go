package idem

import "net/url"

// DryRunParam is the query parameter that asks for an operation's preview
// (SPEC §6.6). It is a control parameter: the pipeline reads it and leaves
// it out of the intent (the fingerprint and the input).
const DryRunParam = "dryRun"

// dryRunMessage is the one message for every malformed dryRun.
const dryRunMessage = "dryRun must be true or false, given once"

// ParseDryRun parses the values of the control parameter dryRun as received
// (nil when absent, which is false). The value is exactly "true" or
// "false", given at most once (SPEC §6.4); any other spelling, an empty
// value or a repeat is INVALID_INPUT at /dryRun, so that no spelling runs
// live what its sender meant as a preview. Every surface parses dryRun
// with it (MCP passes the JSON literal of its boolean argument).
func ParseDryRun(values []string) (bool, error) {
	if len(values) == 1 {
		switch values[0] {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	if len(values) == 0 {
		return false, nil
	}
	return false, invalidInput([]map[string]string{{"path": "/" + DryRunParam, "message": dryRunMessage}})
}

// KeyWithDryRun holds the rule of SPEC §6.4 that a dry run takes no
// idempotency key: the refusal when a call has both, else nil. The
// runner, the Go client and the CLI refuse with it (the last two before
// sending anything).
func KeyWithDryRun(keyed, dryRun bool) *Error {
	if !keyed || !dryRun {
		return nil
	}
	return Errorf(CodeIdempotencyKeyNotSupported, "a dry run takes no idempotency key: preview without it, then send the live request with a new key of its own")
}

// IntentQuery returns q without the control parameter dryRun: the query
// that names the intent (Intent.Query), for the fingerprint and the input.
// q itself is left as it is.
func IntentQuery(q url.Values) url.Values {
	if _, ok := q[DryRunParam]; !ok {
		return q
	}
	out := make(url.Values, len(q)-1)
	for name, values := range q {
		if name != DryRunParam {
			out[name] = values
		}
	}
	return out
}

// checkContract applies the contract checks of SPEC §6.4 in order, and
// takes the call's key once they pass.
func (x *execution) checkContract() *Error {
	m, key, dry := x.op.meta, x.inv.Key, x.inv.DryRun
	if !m.Retry.ReadsKey() {
		key = ""
	}
	if key != "" {
		if err := ValidateKey(key); err != nil {
			return AsError(err)
		}
		if e := KeyWithDryRun(true, dry); e != nil {
			return e
		}
	}
	switch {
	case dry && !m.Retry.Preview:
		return Errorf(CodeDryRunNotSupported, "operation %s has no preview (retry.preview is false); remove dryRun=true", m.Name)
	case key != "" && m.Retry.Kind != RetrySameKeyReplay:
		return Errorf(CodeIdempotencyKeyNotSupported, "operation %s is %s: it takes no Idempotency-Key; follow retry.kind in the catalog", m.Name, m.Retry.Kind)
	case key == "" && !dry && m.Retry.Kind == RetrySameKeyReplay && x.inv.Principal.MustSendKey():
		return Errorf(CodeIdempotencyKeyRequired, "operation %s replays by key: generate a key, record it in durable task state, and send it as Idempotency-Key", m.Name)
	}
	x.key = key
	return nil
}

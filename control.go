package idem

import "net/url"

// The control inputs of a call (SPEC §6.4, §6.6): what a surface reads
// from its transport besides the intent, and the rules every surface
// reads them by.

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
	return false, InvalidInput([]map[string]string{{"path": "/" + DryRunParam, "message": dryRunMessage}})
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

package catalogdiff

import (
	"fmt"
	"strings"

	"github.com/idem-run/idem"
)

// The rules for each field of an operation. docs/catalog-drift.md has the
// same table in prose; keep the two together.

// operationFields are the fields of a catalog operation in SPEC §4 order;
// any other field is compared as unknown (neutral).
var operationFields = []string{"name", "method", "path", "summary", "sideEffect", "idempotent", "timeoutMs",
	"runtimeRetry", "retry", "approval", "surfaces", "errors", "inputSchema", "outputSchema"}

var directFields = []string{"name", "command", "summary", "retry"}

func (d *differ) operation(o, n map[string]any) {
	d.unknownFields("", o, n, operationFields)
	d.route(o, n)
	if !equal(o["summary"], n["summary"]) {
		d.change("summary", Neutral, o["summary"], n["summary"], "wording: nothing a caller relies on changes")
	}
	d.sideEffect(o["sideEffect"], n["sideEffect"])
	if ob, nb := o["idempotent"], n["idempotent"]; !equal(ob, nb) {
		if ob == true && nb != true {
			d.change("idempotent", Widening, ob, nb, "the handler no longer claims that repeating identical input is safe: repeat it only as its retry contract says")
		} else {
			d.change("idempotent", Narrowing, ob, nb, "the handler now claims that repeating identical input is safe; nothing a caller does must change")
		}
	}
	d.timeout(o["timeoutMs"], n["timeoutMs"])
	d.runtimeRetry(asObject(o["runtimeRetry"]), asObject(n["runtimeRetry"]))
	d.retry(asObject(o["retry"]), asObject(n["retry"]))
	d.approval(o["approval"], n["approval"])
	d.surfaces(o["surfaces"], n["surfaces"])
	d.errors(o["errors"], n["errors"])
	d.schema(schemaCtx{path: "inputSchema", label: "the input", input: true}, o["inputSchema"], n["inputSchema"], 0)
	d.schema(schemaCtx{path: "outputSchema", label: "the answer", input: false}, o["outputSchema"], n["outputSchema"], 0)
}

func (d *differ) directEntry(o, n map[string]any) {
	d.unknownFields("", o, n, directFields)
	if !equal(o["command"], n["command"]) {
		d.change("command", Widening, o["command"], n["command"],
			fmt.Sprintf("the command changed: run %s instead", display(n["command"])))
	}
	if !equal(o["summary"], n["summary"]) {
		d.change("summary", Neutral, o["summary"], n["summary"], "wording: nothing a caller relies on changes")
	}
	d.retry(asObject(o["retry"]), asObject(n["retry"]))
}

// unknownFields reports the fields of o and n under prefix that are not
// in known: neutral, since this idem does not know what they mean.
func (d *differ) unknownFields(prefix string, o, n map[string]any, known []string) {
	for _, k := range unionKeys(o, n) {
		if contains(known, k) {
			continue
		}
		ov, inOld := o[k]
		nv, inNew := n[k]
		if inOld && inNew && equal(ov, nv) {
			continue
		}
		d.change(join(prefix, k), Neutral, ov, nv,
			fmt.Sprintf("%q is not a field this idem classifies; review the change by hand", k))
	}
}

func (d *differ) route(o, n map[string]any) {
	if !equal(o["method"], n["method"]) {
		d.change("method", Widening, o["method"], n["method"],
			fmt.Sprintf("the route's method changed: call %s %s; the old method no longer reaches it", display(n["method"]), display(n["path"])))
	}
	op, np := str(o["path"]), str(n["path"])
	if op == np {
		return
	}
	if idem.RouteShape(op) == idem.RouteShape(np) {
		d.change("path", Neutral, o["path"], n["path"],
			"only a path parameter's name changed: the URLs a caller builds are the same (the input schema lists the renamed input)")
		return
	}
	d.change("path", Widening, o["path"], n["path"],
		fmt.Sprintf("the route moved: call %s %s; the old path no longer reaches it", display(n["method"]), np))
}

// sideEffectRank orders side effects by what a repeat can do; external
// and destructive share a rank but differ in kind.
var sideEffectRank = map[string]int{
	string(idem.SideEffectNone): 0, string(idem.SideEffectRead): 1, string(idem.SideEffectWrite): 2,
	string(idem.SideEffectExternal): 3, string(idem.SideEffectDestructive): 3,
}

func (d *differ) sideEffect(o, n any) {
	d.ranked("sideEffect", sideEffectRank, o, n, "the operation now does less than before; nothing a caller does must change",
		fmt.Sprintf("the operation is now %s: a repeat may do more than before; check its retry contract before retrying", display(n)))
}

// ranked classifies a change of an ordered field: down the rank is
// narrowing, anything else (up, sideways, an unknown value) widening.
func (d *differ) ranked(path string, rank map[string]int, o, n any, narrower, wider string) {
	if equal(o, n) {
		return
	}
	or, okO := rank[str(o)]
	nr, okN := rank[str(n)]
	if okO && okN && nr < or {
		d.change(path, Narrowing, o, n, narrower)
		return
	}
	d.change(path, Widening, o, n, wider)
}

func (d *differ) timeout(o, n any) {
	if equal(o, n) {
		return
	}
	of, okO := num(o)
	nf, okN := num(n)
	switch {
	case okO && okN && nf < of:
		d.change("timeoutMs", Widening, o, n,
			fmt.Sprintf("an attempt now ends after %s ms (was %s): a call that used to finish may time out, with an outcome to reconcile as the retry contract says", display(n), display(o)))
	case okO && okN:
		d.change("timeoutMs", Narrowing, o, n,
			fmt.Sprintf("an attempt may now run up to %s ms (was %s); a client deadline sized from the old value may cut a call short, which the retry contract covers", display(n), display(o)))
	default:
		d.change("timeoutMs", Widening, o, n, "the timeout is not a number of milliseconds; review it")
	}
}

var runtimeRetryFields = []string{"maxAttempts", "backoffMs", "retryOn"}

func (d *differ) runtimeRetry(o, n map[string]any) {
	d.unknownFields("runtimeRetry", o, n, runtimeRetryFields)
	if om, nm := o["maxAttempts"], n["maxAttempts"]; !equal(om, nm) {
		of, okO := num(om)
		nf, okN := num(nm)
		switch {
		case okO && okN && nf < of:
			d.change("runtimeRetry.maxAttempts", Narrowing, om, nm,
				fmt.Sprintf("the server now retries the handler at most %s time(s) per call (was %s)", display(nm), display(om)))
		case okO && okN && of == 0:
			d.change("runtimeRetry.maxAttempts", Widening, om, nm,
				fmt.Sprintf("the server now runs the handler up to %s more times within one call: its effects may repeat within a call and a call takes longer; size client deadlines for the retries", display(nm)))
		default:
			d.change("runtimeRetry.maxAttempts", Widening, om, nm,
				fmt.Sprintf("the server now retries the handler up to %s times per call (was %s): a call may repeat its effects more often and take longer", display(nm), display(om)))
		}
	}
	if ob, nb := o["backoffMs"], n["backoffMs"]; !equal(ob, nb) {
		d.change("runtimeRetry.backoffMs", Neutral, ob, nb, "the pacing of the server's own retries; nothing a caller relies on for safety")
	}
	removed, added := setDiff(o["retryOn"], n["retryOn"])
	for _, v := range added {
		d.change("runtimeRetry.retryOn", Widening, nil, v,
			fmt.Sprintf("the server now also retries the handler on %s: its effects may repeat within a call", display(v)))
	}
	for _, v := range removed {
		d.change("runtimeRetry.retryOn", Narrowing, v, nil,
			fmt.Sprintf("the server no longer retries the handler on %s", display(v)))
	}
}

var retryFields = []string{"kind", "keyRequired", "enforcement", "responseSemantics", "reconcile", "rationale", "preview", "secretReplayWindowMs", "transactional"}

// procedure is what a caller does after an ambiguous answer, by kind.
var procedure = map[string]string{
	string(idem.RetryFreshRead):        "repeat it freely",
	string(idem.RetrySameKeyReplay):    "persist an Idempotency-Key before the first call and resend the byte-equivalent request with it, then run reconcile",
	string(idem.RetryConvergent):       "run reconcile and repeat only if the state still differs",
	string(idem.RetryIntrinsicReplay):  "repeat it without a key",
	string(idem.RetryNoAutomaticRetry): "never retry it automatically: request a fresh one",
	string(idem.RetryPreview):          "treat each answer as a fresh observation",
}

// kindDefaults are the enforcement and response semantics each kind
// implies (SPEC §4), and whether it names a reconcile operation.
var kindDefaults = map[string]struct {
	enforcement, semantics string
	reconcile              bool
}{
	string(idem.RetryFreshRead):        {string(idem.EnforceFreshRead), string(idem.SemanticsCurrentState), false},
	string(idem.RetrySameKeyReplay):    {string(idem.EnforceIdempotencyReservation), string(idem.SemanticsOriginalAttemptResult), true},
	string(idem.RetryConvergent):       {string(idem.EnforceResourceIdentity), string(idem.SemanticsCurrentState), true},
	string(idem.RetryIntrinsicReplay):  {string(idem.EnforceServerDerivedTransition), string(idem.SemanticsCurrentState), true},
	string(idem.RetryNoAutomaticRetry): {string(idem.EnforceNone), string(idem.SemanticsPointInTime), false},
	string(idem.RetryPreview):          {string(idem.EnforceNone), string(idem.SemanticsPreview), false},
}

func (d *differ) retry(o, n map[string]any) {
	d.unknownFields("retry", o, n, retryFields)
	kindClass := d.kind(o["kind"], n["kind"])
	d.keyRequired(o["keyRequired"], n["keyRequired"], str(n["kind"]))
	// A field that moves to what the new kind implies follows the kind's
	// change: its class, and a reason that points at retry.kind.
	def, known := kindDefaults[str(n["kind"])]
	follows := func(path string, ov, nv any, implied bool) bool {
		if kindClass == "" || !known || !implied || equal(ov, nv) {
			return false
		}
		d.change(path, kindClass, ov, nv, fmt.Sprintf("follows the change of retry.kind to %s (what that kind implies)", display(n["kind"])))
		return true
	}
	if !follows("retry.enforcement", o["enforcement"], n["enforcement"], str(n["enforcement"]) == def.enforcement) {
		d.enforcement(o["enforcement"], n["enforcement"])
	}
	if !follows("retry.responseSemantics", o["responseSemantics"], n["responseSemantics"], str(n["responseSemantics"]) == def.semantics) {
		d.semantics(o["responseSemantics"], n["responseSemantics"])
	}
	if !follows("retry.reconcile", o["reconcile"], n["reconcile"], n["reconcile"] == nil && !def.reconcile) {
		d.reconcile(o["reconcile"], n["reconcile"])
	}
	if !equal(o["rationale"], n["rationale"]) {
		d.change("retry.rationale", Neutral, o["rationale"], n["rationale"], "wording: the contract's fields say what a caller does")
	}
	if op, np := o["preview"], n["preview"]; !equal(op, np) {
		if op == true {
			d.change("retry.preview", Widening, op, np, "dryRun=true is no longer supported: stop previewing the operation before calling it")
		} else {
			d.change("retry.preview", Narrowing, op, np, "dryRun=true is now supported: a caller may preview the call first")
		}
	}
	d.secretWindow(o["secretReplayWindowMs"], n["secretReplayWindowMs"])
	if ot, nt := o["transactional"], n["transactional"]; !equal(ot, nt) {
		if ot == true {
			d.change("retry.transactional", Widening, ot, nt,
				"a failure before the commit is no longer known to leave nothing: an error answer may be indeterminate; reconcile before repeating")
		} else {
			d.change("retry.transactional", Narrowing, ot, nt,
				"a failure before the commit now leaves nothing and is retryable with the same key")
		}
	}
}

// kind classifies a change of retry.kind (SPEC §4): moving away from
// same_key_replay or fresh_read, or to no_automatic_retry or
// same_key_replay, is widening; towards a kind whose procedure the old one
// already satisfies is narrowing; anything else is reviewed as widening.
//
// It returns the class it recorded, "" when the kind did not change.
func (d *differ) kind(o, n any) Class {
	if equal(o, n) {
		return ""
	}
	ok, nk := str(o), str(n)
	const (
		fresh      = string(idem.RetryFreshRead)
		sameKey    = string(idem.RetrySameKeyReplay)
		convergent = string(idem.RetryConvergent)
		intrinsic  = string(idem.RetryIntrinsicReplay)
		noRetry    = string(idem.RetryNoAutomaticRetry)
	)
	_, knownO := procedure[ok]
	proc, knownN := procedure[nk]
	class, reason := Widening, ""
	switch {
	case !knownO || !knownN:
		reason = "a retry kind this idem does not know: do not retry automatically until the contract is reviewed"
	case nk == noRetry:
		reason = "the operation must no longer be retried automatically: after an ambiguous answer, request a fresh one"
	case nk == sameKey:
		reason = "the operation now needs a key: " + proc + "; a call without one is refused"
	case ok == sameKey:
		reason = "the same-key replay is gone (a key is now refused unless the kind is fresh_read): after an ambiguous answer, " + proc
	case ok == fresh:
		reason = "repeating the operation freely is no longer safe: after an ambiguous answer, " + proc
	case nk == fresh:
		class, reason = Narrowing, "the operation is now a fresh read: repeat it freely"
	case ok == intrinsic && nk == convergent:
		reason = "a blind repeat is no longer safe: after an ambiguous answer, " + proc
	case ok == convergent && nk == intrinsic:
		class, reason = Narrowing, "a repeat without a key is now safe as it is; reconciling first still works"
	case ok == noRetry && (nk == convergent || nk == intrinsic):
		class, reason = Narrowing, "automatic retries are now allowed ("+proc+"); a caller that never retried stays safe"
	default:
		reason = "the retry contract changed in a way not classified: review it; after an ambiguous answer, " + proc
	}
	d.change("retry.kind", class, o, n, reason)
	return class
}

func (d *differ) keyRequired(o, n any, newKind string) {
	if equal(o, n) {
		return
	}
	switch {
	case n == true:
		d.change("retry.keyRequired", Widening, o, n, "send an Idempotency-Key, persisted before the first call: a call without one is refused")
	case newKind == string(idem.RetryFreshRead):
		d.change("retry.keyRequired", Narrowing, o, n, "a key is no longer needed; one that is sent is ignored")
	default:
		d.change("retry.keyRequired", Widening, o, n, "stop sending an Idempotency-Key: the new contract refuses a call that carries one (400)")
	}
}

func (d *differ) enforcement(o, n any) {
	if equal(o, n) {
		return
	}
	const (
		none   = string(idem.EnforceNone)
		resv   = string(idem.EnforceIdempotencyReservation)
		secret = string(idem.EnforceTransactionalSecretReplay)
	)
	oe, ne := str(o), str(n)
	switch {
	case ne == none:
		d.change("retry.enforcement", Widening, o, n, "nothing on the server makes a repeat safe any more: do not retry the operation automatically")
	case oe == none:
		d.change("retry.enforcement", Narrowing, o, n, fmt.Sprintf("the server now makes a repeat safe by %s", ne))
	case oe == resv && ne == secret:
		d.change("retry.enforcement", Widening, o, n,
			"a same-key retry now recovers the result only within retry.secretReplayWindowMs; after that it answers IDEMPOTENCY_RESULT_EXPIRED: reconcile instead")
	case oe == secret && ne == resv:
		d.change("retry.enforcement", Narrowing, o, n, "a same-key retry no longer has a secret window to beat")
	default:
		d.change("retry.enforcement", Widening, o, n,
			fmt.Sprintf("what makes a repeat safe changed from %s to %s: review the contract before retrying", display(o), display(n)))
	}
}

func (d *differ) semantics(o, n any) {
	if equal(o, n) {
		return
	}
	const (
		original = string(idem.SemanticsOriginalAttemptResult)
		current  = string(idem.SemanticsCurrentState)
	)
	switch {
	case str(o) == original && str(n) == current:
		d.change("retry.responseSemantics", Narrowing, o, n, "an answer now reports current state, not a replay of an earlier attempt")
	case str(n) == original:
		d.change("retry.responseSemantics", Widening, o, n,
			"an answer may now be the replay of an earlier attempt, not current state: run reconcile before reporting state")
	default:
		d.change("retry.responseSemantics", Widening, o, n,
			fmt.Sprintf("an answer now means %s, not %s: review how the caller reports it", display(n), display(o)))
	}
}

func (d *differ) reconcile(o, n any) {
	if equal(o, n) {
		return
	}
	switch {
	case n == nil:
		d.change("retry.reconcile", Widening, o, n,
			fmt.Sprintf("the contract no longer names %s as the read to run after an ambiguous answer: follow the new contract instead", display(o)))
	case o == nil:
		d.change("retry.reconcile", Narrowing, o, n,
			fmt.Sprintf("the contract now names %s as the read to run before reporting state", display(n)))
	default:
		d.change("retry.reconcile", Widening, o, n,
			fmt.Sprintf("run %s instead of %s before reporting state", display(n), display(o)))
	}
}

func (d *differ) secretWindow(o, n any) {
	if equal(o, n) {
		return
	}
	of, okO := num(o)
	nf, okN := num(n)
	switch {
	case o == nil && okN:
		d.change("retry.secretReplayWindowMs", Widening, o, n,
			fmt.Sprintf("a same-key retry now recovers the result only within %s ms: retry within it, else reconcile", display(n)))
	case n == nil:
		d.change("retry.secretReplayWindowMs", Narrowing, o, n, "a same-key retry no longer has a secret window to beat")
	case okO && okN && nf < of:
		d.change("retry.secretReplayWindowMs", Widening, o, n,
			fmt.Sprintf("a same-key retry now recovers the secret only within %s ms (was %s): retry sooner, else reconcile", display(n), display(o)))
	case okO && okN:
		d.change("retry.secretReplayWindowMs", Narrowing, o, n,
			fmt.Sprintf("a same-key retry now recovers the secret within %s ms (was %s)", display(n), display(o)))
	default:
		d.change("retry.secretReplayWindowMs", Widening, o, n, "the secret window is not a number of milliseconds; review it")
	}
}

var approvalRank = map[string]int{string(idem.ApprovalNone): 0, string(idem.ApprovalPolicy): 1, string(idem.ApprovalAlways): 2}

func (d *differ) approval(o, n any) {
	d.ranked("approval", approvalRank, o, n, "fewer calls wait for a human approval; a caller that handles APPROVAL_REQUIRED stays correct",
		"a call may now answer APPROVAL_REQUIRED and wait for a human: handle it (have the approval decided, then send the same request again)")
}

func (d *differ) surfaces(o, n any) {
	removed, added := setDiff(o, n)
	for _, s := range removed {
		d.change("surfaces", Widening, s, nil,
			fmt.Sprintf("the operation is no longer exposed over %s: callers there lose it; call it over another surface", display(s)))
	}
	for _, s := range added {
		d.change("surfaces", Narrowing, nil, s, fmt.Sprintf("the operation is now also exposed over %s", display(s)))
	}
}

// errors compares the declared errors by code.
func (d *differ) errors(o, n any) {
	oe, ne := errorsByCode(o), errorsByCode(n)
	for _, code := range unionKeys(oe, ne) {
		path := "errors." + code
		ov, inOld := oe[code]
		nv, inNew := ne[code]
		switch {
		case !inNew:
			d.change(path, Widening, ov, nil,
				fmt.Sprintf("%s is no longer a declared outcome: a caller that relied on it (to detect a conflict, or to stop) must find that case another way", code))
		case !inOld:
			d.change(path, Narrowing, nil, nv,
				fmt.Sprintf("%s is a new declared outcome: a final business answer, not to be retried; handle it to act on it", code))
		default:
			om, nm := asObject(ov), asObject(nv)
			if !equal(om["status"], nm["status"]) {
				d.change(path+".status", Widening, om["status"], nm["status"],
					fmt.Sprintf("%s now comes with HTTP status %s: a caller that dispatches on the status must follow", code, display(nm["status"])))
			}
			if !equal(om["message"], nm["message"]) {
				d.change(path+".message", Neutral, om["message"], nm["message"], "wording: callers act on the code")
			}
			for _, k := range unionKeys(om, nm) {
				if k == "code" || k == "status" || k == "message" || equal(om[k], nm[k]) {
					continue
				}
				d.change(path+"."+k, Neutral, om[k], nm[k], fmt.Sprintf("%q is not a field this idem classifies; review the change by hand", k))
			}
		}
	}
}

// errorsByCode indexes a declared errors list by code; an entry without a
// code is indexed by its position.
func errorsByCode(v any) map[string]any {
	out := map[string]any{}
	list, _ := v.([]any)
	for i, e := range list {
		code := str(asObject(e)["code"])
		if code == "" {
			code = fmt.Sprintf("[%d]", i)
		}
		out[code] = e
	}
	return out
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// display renders a JSON value for a reason: strings as they are, others
// as JSON.
func display(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return strings.TrimSpace(compact(v))
}

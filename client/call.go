package client

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idem-run/idem"
)

// CallOptions are the per-call choices of Call.
type CallOptions struct {
	// IdempotencyKey is sent as the Idempotency-Key header. Record it in
	// durable task state before the call (see Journal): a same-key retry is
	// what makes an ambiguous outcome safe.
	IdempotencyKey string
	// DryRun asks for the operation's preview (dryRun=true). A dry run
	// never carries a key: Call refuses the pair without sending anything.
	DryRun bool
	// Wait, when positive, is sent on every request as Prefer: wait=N
	// (whole seconds, rounded up, at most 30): on an in-flight record the
	// server waits that long for the original to finish. Same-key retries
	// send DefaultRetryWait when Wait is zero.
	Wait time.Duration
	// Retries is how many automatic retries may follow the first request,
	// where the retry contract allows any: 0 means DefaultRetries, a
	// negative number none.
	Retries int
	// RetryTimeout bounds the retries: none starts after it has passed
	// since the first request began. 0 means DefaultRetryTimeout.
	RetryTimeout time.Duration
}

// retryRule is what a call may retry automatically (see the package
// documentation).
type retryRule int

const (
	retryNever retryRule = iota
	retryFreshRead
	retrySameKey
)

// ruleFor returns the retry rule of a call to op.
func ruleFor(op Operation, key string, dryRun bool) retryRule {
	switch {
	case dryRun:
		return retryNever
	case op.Retry.Kind == idem.RetryFreshRead:
		return retryFreshRead
	case op.Retry.Kind == idem.RetrySameKeyReplay && key != "":
		return retrySameKey
	}
	return retryNever
}

// retriesNetwork reports whether a call with no HTTP answer is retried.
func (r retryRule) retriesNetwork() bool { return r != retryNever }

// retriesAnswer reports whether the problem e is retried.
func (r retryRule) retriesAnswer(e *Error) bool {
	switch r {
	case retrySameKey:
		switch e.Code {
		case idem.CodeIdempotencyKeyInFlight, idem.CodeStoreUnavailable, idem.CodeRateLimited, idem.CodeRequestTimeout:
			return true
		}
		// A proxy's 502/503/504 in front of the server is as ambiguous as
		// a dropped connection: the same key settles it.
		return e.Foreign() && e.Retryable
	case retryFreshRead:
		return e.Status >= 500 || e.Status == http.StatusTooManyRequests || e.Status == http.StatusRequestTimeout
	}
	return false
}

// bounds are the limits of one call's retry loop.
type bounds struct {
	retries      int
	retryTimeout time.Duration
	// wait is the Prefer: wait of every request; retryWait that of
	// same-key retries when wait is zero.
	wait, retryWait time.Duration
	// timeout bounds one request that sends Prefer: wait=w.
	timeout func(w time.Duration) time.Duration
}

func (o CallOptions) bounds() bounds {
	b := bounds{retries: o.Retries, retryTimeout: o.RetryTimeout, wait: o.Wait, retryWait: DefaultRetryWait}
	if b.retries == 0 {
		b.retries = DefaultRetries
	}
	if b.retries < 0 {
		b.retries = 0
	}
	if b.retryTimeout <= 0 {
		b.retryTimeout = DefaultRetryTimeout
	}
	return b
}

// systemBounds are the bounds of catalog and system-route reads.
func (c *Client) systemBounds() bounds {
	b := CallOptions{Retries: c.readRetries, RetryTimeout: c.readRetryTimeout}.bounds()
	b.timeout = c.fixedTimeout(catalogTimeout)
	return b
}

func (c *Client) fixedTimeout(d time.Duration) func(time.Duration) time.Duration {
	return func(w time.Duration) time.Duration {
		if c.requestTimeout > 0 {
			return c.requestTimeout
		}
		return d + w
	}
}

// Call calls the named operation with flat arguments: path parameters,
// query parameters, header inputs and body fields at the top level, as the
// catalog's inputSchema describes them. It returns the envelope of a
// success, or an *Error: the server's problem object, a raw operation's
// own answer of 400 or more (Upstream: a proxied upstream's plain 404 is
// its answer, not INTERNAL), or NETWORK_ERROR (Status 0) when no HTTP
// answer arrived. It retries only as the
// operation's retry contract allows (see the package documentation).
func (c *Client) Call(ctx context.Context, operation string, args map[string]json.RawMessage, opts CallOptions) (*Result, error) {
	p, err := c.prepare(ctx, operation, args, opts)
	if err != nil {
		return nil, err
	}
	return c.do(ctx, p.r, p.rule, p.b, p.op.Name, p.key, p.op.Retry.Reconcile)
}

// CallResult calls the named operation as Call does, with the same retry
// rules (CallOptions.Retries -1 sends exactly one request), and returns
// the server's last answer whatever its status, as the idem.Result a
// local Runner gives: idem.ParseResult of the envelope or problem object,
// or idem.RawResultOf for a raw operation's own answer (from idem proxy:
// header Idem-Execution-Id and a body that is not an idem problem). The
// error is an *Error when there is no such answer: NETWORK_ERROR, a call
// refused before sending anything (Local), or an answer that is not
// idem's (Foreign: INTERNAL with the answer's Status).
func (c *Client) CallResult(ctx context.Context, operation string, args map[string]json.RawMessage, opts CallOptions) (idem.Result, error) {
	p, err := c.prepare(ctx, operation, args, opts)
	if err != nil {
		return idem.Result{}, err
	}
	a, n, nerr := c.exchange(ctx, p.r, p.rule, p.b, p.op.Name, p.key, p.op.Retry.Reconcile)
	if nerr != nil {
		return idem.Result{}, nerr
	}
	res, perr := idem.ParseResult(a.status, a.header, a.body)
	if a.header.Get(idem.HeaderExecutionID) != "" && (perr != nil || res.Problem == nil || !strings.HasPrefix(res.Problem.Type, idem.ProblemTypeBase)) {
		// A raw operation's own answer: the upstream's body, with the
		// idempotency facts in headers. idem's own problems about it
		// carry the header too, and a type that names idem.
		meta := &idem.Meta{Operation: p.op.Name}
		if p.key != "" {
			meta.Idempotency = &idem.IdempotencyMeta{Key: p.key}
		}
		return idem.RawResultOf(a.status, a.header, a.body, meta), nil
	}
	if perr != nil {
		e := foreignError(a, p.op.Name, p.key)
		e.Requests = n
		return idem.Result{}, e
	}
	return res, nil
}

// prepared is a call ready to send.
type prepared struct {
	op   Operation
	key  string
	r    request
	rule retryRule
	b    bounds
}

// prepare checks a call against the retry contract and the catalog and
// builds its request and retry bounds.
func (c *Client) prepare(ctx context.Context, operation string, args map[string]json.RawMessage, opts CallOptions) (*prepared, error) {
	key := opts.IdempotencyKey
	if e := idem.KeyWithDryRun(key != "", opts.DryRun); e != nil {
		return nil, RefusedError(e.Code, operation, nil, "%s", e.Message)
	}
	cat, err := c.Catalog(ctx)
	if err != nil {
		return nil, err
	}
	op, ok := cat.Operation(operation)
	if !ok {
		return nil, localError(idem.CodeOperationNotFound, nil, map[string]any{"operation": operation},
			"the catalog at %s has no operation %q%s", c.base.Redacted(), operation, cat.didYouMean(operation))
	}
	r, lerr := buildRequest(op, args, opts.DryRun)
	if lerr != nil {
		return nil, lerr
	}
	if key != "" {
		r.header.Set(idem.HeaderIdempotencyKey, key)
	}
	rule := ruleFor(op, key, opts.DryRun)
	r.once = rule != retryFreshRead || key != ""
	b := opts.bounds()
	b.timeout = func(w time.Duration) time.Duration {
		if c.requestTimeout > 0 {
			return c.requestTimeout
		}
		return op.Bound() + w + 15*time.Second
	}
	return &prepared{op: op, key: key, r: r, rule: rule, b: b}, nil
}

// buildRequest places the arguments of a call to op.
func buildRequest(op Operation, args map[string]json.RawMessage, dryRun bool) (request, *Error) {
	meta := &idem.Meta{Operation: op.Name}
	pl, err := idem.PlaceArguments(op.Locations(), args)
	if err != nil {
		ie := idem.AsError(err)
		return request{}, localError(idem.CodeInvalidInput, meta, ie.Details, "%s", ie.Message)
	}
	var missing []map[string]string
	for _, name := range idem.PathParamNames(op.Path) {
		if pl.PathParams[name] == "" {
			missing = append(missing, map[string]string{"path": "/" + name, "message": "required: the path parameter " + name + " of " + op.Path})
		}
	}
	if len(missing) > 0 {
		return request{}, localError(idem.CodeInvalidInput, meta, map[string]any{"errors": missing},
			"%s needs its path parameters: %s", op.Name, missingNames(missing))
	}
	q := pl.Query
	if dryRun {
		q.Set(idem.DryRunParam, "true")
	}
	return request{
		method: op.Method, path: idem.FillPath(op.Path, pl.PathParams), query: q,
		body: pl.Body, header: pl.Header, auth: true,
	}, nil
}

func missingNames(errs []map[string]string) string {
	s := ""
	for i, e := range errs {
		if i > 0 {
			s += ", "
		}
		s += e["path"][1:]
	}
	return s
}

// get reads a system route (or the catalog) as a fresh read.
func (c *Client) get(ctx context.Context, r request) (*Result, error) {
	return c.do(ctx, r, retryFreshRead, c.systemBounds(), "", "", "")
}

// do sends r, retrying under rule within b: the envelope of a success,
// or the *Error of the last answer or of no answer.
func (c *Client) do(ctx context.Context, r request, rule retryRule, b bounds, operation, key, reconcile string) (*Result, error) {
	a, n, nerr := c.exchange(ctx, r, rule, b, operation, key, reconcile)
	if nerr != nil {
		return nil, nerr
	}
	if a.status >= 400 {
		e := problemError(a, operation, key)
		e.Requests = n
		return nil, e
	}
	return successResult(a, n), nil
}

// exchange sends r, retrying under rule within b, and returns the last
// HTTP answer and how many requests were sent; the error is the
// NETWORK_ERROR of a call that ended with no answer.
func (c *Client) exchange(ctx context.Context, r request, rule retryRule, b bounds, operation, key, reconcile string) (answer, int, *Error) {
	if r.header == nil {
		r.header = http.Header{}
	}
	deadline := time.Now().Add(b.retryTimeout)
	var (
		last    *answer
		lastNet error
	)
	for n := 1; ; n++ {
		wait := b.wait
		if wait <= 0 && n > 1 && rule == retrySameKey {
			wait = max(min(b.retryWait, time.Until(deadline)), time.Second)
		}
		sent := r
		sent.header = r.header.Clone()
		if wait > 0 {
			secs := min(int((wait+time.Second-1)/time.Second), 30)
			wait = time.Duration(secs) * time.Second
			sent.header.Set("Prefer", "wait="+strconv.Itoa(secs))
		}
		a, err := c.send(ctx, sent, b.timeout(wait))
		var retryAfter time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return answer{}, n, c.networkError(r, operation, key, reconcile, n, context.Cause(ctx))
			}
			last, lastNet = nil, err
			if !rule.retriesNetwork() {
				return answer{}, n, c.networkError(r, operation, key, reconcile, n, err)
			}
		case a.status < 400:
			return a, n, nil
		default:
			if !rule.retriesAnswer(problemError(a, operation, key)) {
				return a, n, nil
			}
			last, lastNet = &a, nil
			retryAfter = parseRetryAfter(a.header.Get(idem.HeaderRetryAfter))
		}
		delay := max(c.delay(n), retryAfter)
		if n > b.retries || time.Now().Add(delay).After(deadline) {
			if last != nil {
				return *last, n, nil
			}
			return answer{}, n, c.networkError(r, operation, key, reconcile, n, lastNet)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			if last != nil {
				return *last, n, nil
			}
			return answer{}, n, c.networkError(r, operation, key, reconcile, n, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// delay is the backoff before retry n (after request n): exponential from
// c.backoff, capped at c.maxBackoff, with jitter in its upper half.
func (c *Client) delay(n int) time.Duration {
	d := c.backoff
	for i := 1; i < n && d < c.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.maxBackoff)
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// parseRetryAfter reads Retry-After in seconds (0 when absent or a date).
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, time.Minute)
}

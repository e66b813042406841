package client

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
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
		return e.foreign() && e.Retryable
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
// query parameters and body fields at the top level, as the catalog's
// inputSchema describes them. It returns the envelope of a success, or an
// *Error: the server's problem object, or NETWORK_ERROR (Status 0) when no
// HTTP answer arrived. It retries only as the operation's retry contract
// allows (see the package documentation).
func (c *Client) Call(ctx context.Context, operation string, args map[string]json.RawMessage, opts CallOptions) (*Result, error) {
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
			"the catalog at %s has no operation %q", c.base, operation)
	}
	r, lerr := buildRequest(op, args, opts.DryRun)
	if lerr != nil {
		return nil, lerr
	}
	if key != "" {
		r.header.Set(idem.HeaderIdempotencyKey, key)
	}
	b := opts.bounds()
	b.timeout = func(w time.Duration) time.Duration {
		if c.requestTimeout > 0 {
			return c.requestTimeout
		}
		return op.Bound() + w + 15*time.Second
	}
	return c.do(ctx, r, ruleFor(op, key, opts.DryRun), b, op.Name, key, op.Retry.Reconcile)
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

// do sends r, retrying under rule within b.
func (c *Client) do(ctx context.Context, r request, rule retryRule, b bounds, operation, key, reconcile string) (*Result, error) {
	if r.header == nil {
		r.header = http.Header{}
	}
	deadline := time.Now().Add(b.retryTimeout)
	var (
		last    *Error
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
				return nil, c.networkError(r, operation, key, reconcile, n, context.Cause(ctx))
			}
			last, lastNet = nil, err
			if !rule.retriesNetwork() {
				return nil, c.networkError(r, operation, key, reconcile, n, err)
			}
		case a.status < 400:
			return successResult(a, n), nil
		default:
			e := problemError(a, operation, key)
			e.Requests = n
			if !rule.retriesAnswer(e) {
				return nil, e
			}
			last, lastNet = e, nil
			retryAfter = parseRetryAfter(a.header.Get(idem.HeaderRetryAfter))
		}
		delay := max(c.delay(n), retryAfter)
		if n > b.retries || time.Now().Add(delay).After(deadline) {
			if last != nil {
				return nil, last
			}
			return nil, c.networkError(r, operation, key, reconcile, n, lastNet)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			if last != nil {
				return nil, last
			}
			return nil, c.networkError(r, operation, key, reconcile, n, context.Cause(ctx))
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

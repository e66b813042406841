package pipeline

import (
	"github.com/idem-run/idem"

	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Admission control (SPEC §6.8). Two budgets bound the memory of
// concurrent calls; a call that does not fit waits for room up to
// Config.AdmissionWait, first come first served, and is then
// answered 429 RATE_LIMITED with Retry-After, before anything is stored:
//
//   - the decode budget, in bytes, covers the bodies being read and
//     decoded (through stage 4). Decoding is where memory grows with the
//     input: the fingerprint, the argument object, the schema validator's
//     tree and the Go value cost tens of times the body
//     (docs/PERFORMANCE.md). A surface that reads the body itself takes its
//     share before reading it (AdmitBody), so that a refused body is never
//     read; otherwise Call takes len(Body).
//   - the execution budget counts executions (live handlers and previews)
//     running at once; it is taken just before stage 8, so replays, 409s
//     and waits on an in-flight key never need it, and a refusal stores
//     nothing and consumes no key.
const (
	// DefaultDecodeBudget is Config.DecodeBudget's default: four
	// bodies of the 1 MiB limit decoding at once, two per core of a
	// 2-core machine.
	DefaultDecodeBudget = 4 << 20
	// DefaultMaxExecutions is Config.MaxExecutions's default.
	DefaultMaxExecutions = 64
	// DefaultAdmissionWait is Config.AdmissionWait's default.
	DefaultAdmissionWait = 5 * time.Second
	// DefaultMaxWaiters is Config.MaxWaiters's default: a same-key storm
	// of a thousand callers waits whole.
	DefaultMaxWaiters = 1024
	// minBodyCost is the least a call counts against the decode budget, so
	// that the budget also bounds how many small bodies decode at once.
	minBodyCost = 1 << 10
)

// budget is a counting bound with a FIFO wait; nil sem means unbounded.
type budget struct {
	sem     *semaphore.Weighted
	max     int64
	waiting *atomic.Int64 // calls waiting for room (tests watch it)
}

func newBudget(max int64) budget {
	if max <= 0 {
		return budget{}
	}
	return budget{sem: semaphore.NewWeighted(max), max: max, waiting: new(atomic.Int64)}
}

// take waits up to wait (not at all when wait <= 0) for n (capped at max,
// so that one large request fits an empty budget) and returns a release
// that gives it back once, however often it is called; nil when n did not
// fit in time or ctx ended.
func (b *budget) take(ctx context.Context, n int64, wait time.Duration) func() {
	if b.sem == nil {
		return func() {}
	}
	n = min(n, b.max)
	if !b.sem.TryAcquire(n) {
		if wait <= 0 {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		b.waiting.Add(1)
		err := b.sem.Acquire(wctx, n)
		b.waiting.Add(-1)
		cancel()
		if err != nil {
			return nil
		}
	}
	var once sync.Once
	return func() { once.Do(func() { b.sem.Release(n) }) }
}

// AdmitBody takes size bytes of the decode budget for a request body the
// surface is about to read (pass the body limit when the size is not
// declared). It returns the release, safe to call more than once, or a
// RATE_LIMITED error when the budget is spent; the caller then answers
// without reading the body. Pass the release as Invocation.ReleaseBody.
func (r *Runner) AdmitBody(ctx context.Context, size int64) (release func(), err error) {
	if release = r.decoding.take(ctx, max(size, minBodyCost), r.cfg.AdmissionWait); release == nil {
		return nil, idem.Errorf(idem.CodeRateLimited, "the server is decoding as many request bodies as it admits at once; send the same request again after Retry-After seconds (nothing was stored and no key was consumed)")
	}
	return release, nil
}

// A BodyCharge is a request body's share of the decode budget, taken as
// the body arrives: a first share before any byte is read (ChargeBody),
// then more as the bytes read fill it (Grow), so that a body holds at most
// about twice what it has sent. A client that declares a large body and
// sends it slowly holds almost nothing, and cannot lock other callers
// out of the budget (issue 28, item 2).
type BodyCharge struct {
	b    *budget
	ctx  context.Context
	wait time.Duration
	held int64
	once sync.Once
}

// maxBodyStep bounds one growth of a BodyCharge.
const maxBodyStep = 64 << 10

// ChargeBody takes the first share of a body the surface is about to read:
// minBodyCost, whatever its declared length (so that the budget also
// bounds how many small bodies decode at once). It returns a
// RATE_LIMITED error when the budget is spent, and the body must then not
// be read. A bodiless request needs no charge (Call takes none for an
// empty body). Pass Release as Invocation.ReleaseBody.
func (r *Runner) ChargeBody(ctx context.Context) (*BodyCharge, error) {
	c := &BodyCharge{b: &r.decoding, ctx: ctx, wait: r.cfg.AdmissionWait}
	if !c.take(minBodyCost) {
		return nil, idem.Errorf(idem.CodeRateLimited, "the server is decoding as many request bodies as it admits at once; send the same request again after Retry-After seconds (nothing was stored and no key was consumed)")
	}
	return c, nil
}

// Held is the number of bytes the body may have read so far.
func (c *BodyCharge) Held() int64 { return c.held }

// Grow takes more of the budget once the bytes read fill what is held: as
// much again, at most maxBodyStep, if the budget has that free now. When
// it has not, waiting while holding a part could leave bodies that each
// hold a part waiting for one another, so the part is given back and the
// body waits, first come first served as any admission, for all it may
// still need (need: its declared length, or the body limit, and a byte to
// see its end), then holds that. It returns RATE_LIMITED when there is no
// room in time.
func (c *BodyCharge) Grow(need int64) error {
	if c.tryTake(min(c.held, maxBodyStep)) {
		return nil
	}
	had := c.held
	c.giveBack()
	if !c.take(max(need, had+1)) {
		return idem.Errorf(idem.CodeRateLimited, "the server is decoding as many request bodies as it admits at once; send the same request again after Retry-After seconds (nothing was stored and no key was consumed)")
	}
	return nil
}

// tryTake takes n more if the budget has it free now.
func (c *BodyCharge) tryTake(n int64) bool {
	if a := c.taking(n); a > 0 && !c.b.sem.TryAcquire(a) {
		return false
	}
	c.held += n
	return true
}

// taking is how much of n more room the budget must give: nothing when it
// is unbounded, and one body never takes more than the whole budget (past
// it the room grows without taking more: what is taken is min(held, max)).
func (c *BodyCharge) taking(n int64) int64 {
	if c.b.sem == nil {
		return 0
	}
	return min(n, c.b.max-min(c.held, c.b.max))
}

// giveBack returns what is held, to take it again.
func (c *BodyCharge) giveBack() {
	if c.b.sem != nil && c.held > 0 {
		c.b.sem.Release(min(c.held, c.b.max))
	}
	c.held = 0
}

// take takes n more, waiting for room up to the admission wait.
func (c *BodyCharge) take(n int64) bool {
	if a := c.taking(n); a > 0 && !c.b.sem.TryAcquire(a) {
		if c.wait <= 0 {
			return false
		}
		wctx, cancel := context.WithTimeout(c.ctx, c.wait)
		c.b.waiting.Add(1)
		err := c.b.sem.Acquire(wctx, a)
		c.b.waiting.Add(-1)
		cancel()
		if err != nil {
			return false
		}
	}
	c.held += n
	return true
}

// Release gives the share back, once, however often it is called.
func (c *BodyCharge) Release() {
	c.once.Do(func() {
		if c.b.sem != nil {
			c.b.sem.Release(min(c.held, c.b.max))
		}
	})
}

// admitInput returns the release of the call's share of the decode
// budget: the surface's (Invocation.ReleaseBody) or one taken now; a
// bodiless call needs none.
func (x *execution) admitInput(ctx context.Context) (func(), *idem.Error) {
	if x.inv.ReleaseBody != nil {
		return x.inv.ReleaseBody, nil
	}
	if len(x.inv.Intent.Body) == 0 {
		return func() {}, nil
	}
	release, err := x.r.AdmitBody(ctx, int64(len(x.inv.Intent.Body)))
	if err != nil {
		return nil, idem.AsError(err)
	}
	return release, nil
}

// bytesPerValue is what a JSON value counts against the decode budget at
// the least: decoding and validating cost per value, not per byte, so a
// body of many tiny values (250,000 one-letter strings in 1 MiB, each off
// an enum: a quarter of a million validation errors) costs far more than
// its bytes say. With 16, such a body counts as 4 MiB, the whole default
// budget, and decodes alone; a body of ordinary objects (tens of bytes a
// value) is charged its bytes as before.
const bytesPerValue = 16

// admitDense makes the call's share of the decode budget cover its body's
// values (valueCount of the canonical body, bytesPerValue each) when that
// is more than its bytes: the share the surface took is given back and the
// whole taken again, in turn, so that a call never waits while it holds a
// part (see BodyCharge.Grow). It returns the release of the share the call
// holds now.
func (x *execution) admitDense(ctx context.Context, release func()) (func(), *idem.Error) {
	cost := int64(valueCount(x.canon)) * bytesPerValue
	if cost <= max(int64(len(x.inv.Intent.Body)), minBodyCost) || x.r.decoding.sem == nil {
		return release, nil // charged enough already (at least its bytes, or minBodyCost)
	}
	release()
	more := x.r.decoding.take(ctx, cost, x.r.cfg.AdmissionWait)
	if more == nil {
		return func() {}, idem.Errorf(idem.CodeRateLimited, "the server is decoding as many request bodies as it admits at once (this body's %d values count as %d bytes); send the same request again after Retry-After seconds (nothing was stored and no key was consumed)", cost/bytesPerValue, cost)
	}
	return more, nil
}

// valueCount is the number of JSON values in canonical (no whitespace):
// the root, one after each ':', and in arrays one after each '[' that does
// not close at once and each ','.
func valueCount(canonical []byte) int {
	if len(canonical) == 0 {
		return 0
	}
	n, inString, escaped := 1, false, false
	var open []byte // the containers around the current byte
	for i, c := range canonical {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			open = append(open, c)
			if c == '[' && i+1 < len(canonical) && canonical[i+1] != ']' {
				n++
			}
		case c == ']' || c == '}':
			open = open[:max(len(open)-1, 0)]
		case c == ':':
			n++
		case c == ',' && len(open) > 0 && open[len(open)-1] == '[':
			n++
		}
	}
	return n
}

// admitExecution takes a place among the executions running at once.
func (x *execution) admitExecution(ctx context.Context) (func(), *idem.Error) {
	release := x.r.executions.take(ctx, 1, x.r.cfg.AdmissionWait)
	if release == nil {
		return nil, idem.Errorf(idem.CodeRateLimited, "the server runs as many executions as it admits at once; send the same request again after Retry-After seconds (nothing was stored and no key was consumed)")
	}
	return release, nil
}

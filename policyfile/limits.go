package policyfile

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/idem-run/idem"
)

// MaxBuckets bounds the token buckets of one limit: past it, idle buckets
// (full again) are dropped, at most once a second; a principal, org or
// operation that finds no room then shares one overflow bucket with every
// other such caller, so that many principals cannot grow memory without
// bound, nor escape the limit.
const MaxBuckets = 10_000

// limit is one compiled Limit: a token bucket per key.
type limit struct {
	name  string
	per   string
	sel   selector
	every rate.Limit
	burst int
	// tokens are shared with the same limit of a later set (Keep).
	*tokens
}

// tokens are a limit's token buckets.
type tokens struct {
	mu       sync.Mutex
	buckets  map[string]*rate.Limiter
	overflow *rate.Limiter
	swept    time.Time
}

func newLimit(l Limit, known map[string]bool) (*limit, error) {
	if l.Name == "" {
		return nil, errors.New("name is required")
	}
	switch l.Per {
	case "principal", "org", "operation":
	default:
		return nil, fmt.Errorf("per %q is not one of principal, org, operation", l.Per)
	}
	n, unit, err := parseRate(l.Rate)
	if err != nil {
		return nil, err
	}
	burst := l.Burst
	if burst < 0 {
		return nil, fmt.Errorf("burst %d is negative", burst)
	}
	if burst == 0 {
		burst = max(1, min(n, math.MaxInt32))
	}
	sel := selector{l.Operations, l.SideEffects}
	if err := sel.check(known); err != nil {
		return nil, err
	}
	every := rate.Limit(float64(n) / unit.Seconds())
	return &limit{name: l.Name, per: l.Per, sel: sel, every: every, burst: burst,
		tokens: &tokens{buckets: map[string]*rate.Limiter{}, overflow: rate.NewLimiter(every, burst)}}, nil
}

// Keep carries the token buckets of old's limits over to those of s with
// the same name, per, rate and burst, before s is put in place: a reload
// (SIGHUP, a changed file, the operations declared again) that leaves a
// limit as it was does not refill it. The two sets then share those
// buckets, so calls still running under old count as well.
func (s *Set) Keep(old *Set) {
	if old == nil {
		return
	}
	for _, l := range s.limits {
		for _, o := range old.limits {
			if o.name == l.name && o.per == l.per && o.every == l.every && o.burst == l.burst {
				l.tokens = o.tokens
			}
		}
	}
}

// parseRate reads N/s, N/m or N/h.
func parseRate(s string) (int, time.Duration, error) {
	num, unit, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || n < 1 {
		return 0, 0, fmt.Errorf("rate %q is not N/s, N/m or N/h with N at least 1", s)
	}
	switch unit {
	case "s":
		return n, time.Second, nil
	case "m":
		return n, time.Minute, nil
	case "h":
		return n, time.Hour, nil
	}
	return 0, 0, fmt.Errorf("rate %q: the unit is s, m or h", s)
}

func (l *limit) key(p idem.Principal, m idem.Metadata) string {
	switch l.per {
	case "principal":
		return p.Org + "\x00" + p.ID
	case "org":
		return p.Org
	}
	return m.Name
}

// bucket returns key's bucket, made if there is room.
func (l *limit) bucket(key string, now time.Time) *rate.Limiter {
	if b, ok := l.buckets[key]; ok {
		return b
	}
	if len(l.buckets) >= MaxBuckets && now.Sub(l.swept) >= time.Second {
		l.swept = now
		for k, b := range l.buckets {
			if b.TokensAt(now) >= float64(l.burst) {
				delete(l.buckets, k)
			}
		}
	}
	if len(l.buckets) >= MaxBuckets {
		return l.overflow
	}
	b := rate.NewLimiter(l.every, l.burst)
	l.buckets[key] = b
	return b
}

// opLimits are the limits that apply to an operation of this side effect.
type opLimits struct {
	sideEffect idem.SideEffect
	limits     []*limit
}

// matching are the limits whose selector matches m, in file order.
func (s *Set) matching(m idem.Metadata) []*limit {
	var out []*limit
	for _, l := range s.limits {
		if l.sel.matches(m) {
			out = append(out, l)
		}
	}
	return out
}

// limitsFor are the limits that apply to a call of m: those found at
// Compile, or, for an operation the set was not compiled for (declared
// by a reload the set has not followed yet), matched now.
func (s *Set) limitsFor(m idem.Metadata) []*limit {
	if ol, ok := s.opLimits[m.Name]; ok && ol.sideEffect == m.SideEffect {
		return ol.limits
	}
	return s.matching(m)
}

// Limited is the answer to a call beyond a limit.
type Limited struct {
	// Limit names the limit.
	Limit string
	// RetryAfter is when a token is next free.
	RetryAfter time.Duration
}

// Take takes a token for a call of p to m at now from every limit that
// applies. When one has none, it takes none from any and returns the
// limit that refused, and how long until it has one.
func (s *Set) Take(p idem.Principal, m idem.Metadata, now time.Time) *Limited {
	if len(s.limits) == 0 {
		return nil
	}
	var taken []*rate.Reservation
	var refused *Limited
	for _, l := range s.limitsFor(m) {
		l.mu.Lock()
		r := l.bucket(l.key(p, m), now).ReserveN(now, 1)
		l.mu.Unlock()
		if d := r.DelayFrom(now); !r.OK() || d > 0 {
			r.CancelAt(now)
			if refused == nil || d > refused.RetryAfter {
				refused = &Limited{Limit: l.name, RetryAfter: d}
			}
			continue
		}
		taken = append(taken, r)
	}
	if refused != nil {
		for _, r := range taken {
			r.CancelAt(now)
		}
	}
	return refused
}

// Error is the answer to a call l refused: 429 RATE_LIMITED, with the
// seconds to wait in details.retryAfterSeconds (Retry-After over HTTP).
func (l *Limited) Error() *idem.Error {
	secs := int(math.Ceil(l.RetryAfter.Seconds()))
	if secs < 1 {
		secs = 1
	}
	return idem.Errorf(idem.CodeRateLimited, "this call is beyond the rate limit %s of this instance; send the same request again (with the same key) after Retry-After (%d s): nothing was stored and no key was consumed", l.Limit, secs).
		WithDetail("limit", l.Limit).WithDetail("retryAfterSeconds", secs)
}

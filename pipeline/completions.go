package pipeline

import (
	"sync"

	"github.com/idem-run/idem"
)

// completions wakes callers waiting (Prefer: wait) on an in-flight key when
// it finishes: on this instance, or on another when the store's
// CompletionFeed says so (the runner feeds finished from it).
type completions struct {
	mu      sync.Mutex
	waiting map[cacheKey]*waiters
	running map[cacheKey]bool // keys this instance is executing
}

type waiters struct {
	done chan struct{}
	n    int
}

// started records that this instance executes (scope, key).
func (c *completions) started(scope idem.Scope, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		c.running = map[cacheKey]bool{}
	}
	c.running[keyOf(scope, key)] = true
}

// wait returns a channel closed when (scope, key) is finished (here, or
// elsewhere when the store's feed says so), a function the waiter calls
// when it stops waiting, and whether the key needs watching: it is the
// first waiter and the key runs on another instance.
func (c *completions) wait(scope idem.Scope, key string) (<-chan struct{}, func(), bool) {
	k := keyOf(scope, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting == nil {
		c.waiting = map[cacheKey]*waiters{}
	}
	w := c.waiting[k]
	first := w == nil
	if first {
		w = &waiters{done: make(chan struct{})}
		c.waiting[k] = w
	}
	w.n++
	return w.done, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if w.n--; w.n == 0 && c.waiting[k] == w {
			delete(c.waiting, k)
		}
	}, first && !c.running[k]
}

// finished wakes the waiters of (scope, key).
func (c *completions) finished(scope idem.Scope, key string) {
	k := keyOf(scope, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.running, k)
	if w := c.waiting[k]; w != nil {
		close(w.done)
		delete(c.waiting, k)
	}
}

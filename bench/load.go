package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// token is the demo bearer token every request carries.
const token = "demo-agent"

// newClient returns an HTTP client whose keep-alive pool holds a connection
// for each of n concurrent callers.
func newClient(n int) *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        n + 16,
			MaxIdleConnsPerHost: n + 16,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
}

// reply is what the harness keeps of one answer.
type reply struct {
	status   int
	replayed bool // Idempotent-Replayed: true
	body     []byte
}

// post sends one POST with a JSON body; key and prefer are omitted when empty.
func post(ctx context.Context, c *http.Client, url, key, prefer string, body []byte, keepBody bool) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	if keepBody || resp.StatusCode >= 300 {
		r.body, err = io.ReadAll(resp.Body)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	return r, err
}

// phase is the measurement of one load phase.
type phase struct {
	requests int64
	errors   int64
	firstErr string
	elapsed  time.Duration
	lat      []time.Duration // sorted
}

func (p phase) rate() float64 {
	if p.elapsed <= 0 {
		return 0
	}
	return float64(p.requests) / p.elapsed.Seconds()
}

// quantile returns the q-quantile of the sorted latencies (nearest rank).
func quantile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	i := int(q*float64(len(lat))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(lat) {
		i = len(lat) - 1
	}
	return lat[i]
}

// drive runs do from clients goroutines for d, each calling it with its
// worker number and a per-worker sequence number, and times every call. A
// call that returns an error counts as an error, not as a request. A
// progress line on stderr shows the rate each second.
func drive(ctx context.Context, label string, clients int, d time.Duration, do func(ctx context.Context, w, i int) error) phase {
	return drivePaced(ctx, label, clients, d, 0, do)
}

// drivePaced is drive with the total rate held at rate requests/s (0: as
// fast as the server answers). Each worker sends on its own schedule and
// sends at once when behind it; latency is timed from the actual send.
func drivePaced(ctx context.Context, label string, clients int, d time.Duration, rate float64, do func(ctx context.Context, w, i int) error) phase {
	var done, failed atomic.Int64
	var mu sync.Mutex
	var firstErr string
	lats := make([][]time.Duration, clients)
	start := time.Now()
	deadline := start.Add(d)
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case now := <-t.C:
				n := done.Load()
				progressf("%s: %4.1fs %8d req %8.0f/s %d errors", label, now.Sub(start).Seconds(), n, float64(n)/now.Sub(start).Seconds(), failed.Load())
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			own := make([]time.Duration, 0, 4096)
			var interval time.Duration
			if rate > 0 {
				interval = time.Duration(float64(clients) / rate * float64(time.Second))
			}
			offset := interval * time.Duration(w) / time.Duration(clients)
			for i := 0; ctx.Err() == nil && time.Now().Before(deadline); i++ {
				if interval > 0 {
					if wait := time.Until(start.Add(offset + time.Duration(i)*interval)); wait > 0 {
						time.Sleep(wait)
					}
					if !time.Now().Before(deadline) {
						break
					}
				}
				t0 := time.Now()
				err := do(ctx, w, i)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if firstErr == "" {
						firstErr = err.Error()
					}
					mu.Unlock()
					continue
				}
				own = append(own, time.Since(t0))
				done.Add(1)
			}
			lats[w] = own
		}(w)
	}
	wg.Wait()
	close(stopProgress)
	p := phase{requests: done.Load(), errors: failed.Load(), firstErr: firstErr, elapsed: time.Since(start)}
	for _, l := range lats {
		p.lat = append(p.lat, l...)
	}
	sort.Slice(p.lat, func(i, j int) bool { return p.lat[i] < p.lat[j] })
	return p
}

// stormResult is the outcome of one same-key storm.
type stormResult struct {
	Requests     int     `json:"requests"`
	Executions   int     `json:"executions"`   // 2xx answers not marked replayed
	ExecutionIDs int     `json:"executionIds"` // distinct executionIds among 2xx answers
	Replays      int     `json:"replays"`
	InFlight     int     `json:"inFlight409"`
	Other        int     `json:"other"`
	Errors       int     `json:"transportErrors"`
	FirstOther   string  `json:"firstOther,omitempty"`
	WaitP50Ms    float64 `json:"waitersAfterOriginalP50Ms"`
	WaitP99Ms    float64 `json:"waitersAfterOriginalP99Ms"`
	WaitMaxMs    float64 `json:"waitersAfterOriginalMaxMs"`
	ElapsedMs    float64 `json:"elapsedMs"`
}

// storm sends n concurrent requests with one key, spread over urls, all
// released at once, and counts how many executed. With wait, each carries
// Prefer: wait=5. The waiters' latency is measured from the moment the
// original's answer arrived to the moment each replay arrived (0 when a
// replay arrived first, which can happen: the record completes before the
// original's bytes reach the harness).
func storm(ctx context.Context, urls []string, n int, key string, body []byte, wait bool) stormResult {
	c := newClient(n)
	defer c.CloseIdleConnections()
	prefer := ""
	if wait {
		prefer = "wait=5"
	}
	type answer struct {
		r   reply
		err error
		at  time.Time
	}
	answers := make([]answer, n)
	release := make(chan struct{})
	var ready, wg sync.WaitGroup
	for i := 0; i < n; i++ {
		ready.Add(1)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ready.Done()
			<-release
			r, err := post(ctx, c, urls[i%len(urls)], key, prefer, body, true)
			answers[i] = answer{r: r, err: err, at: time.Now()}
		}(i)
	}
	ready.Wait()
	start := time.Now()
	close(release)
	wg.Wait()
	res := stormResult{Requests: n, ElapsedMs: ms(time.Since(start))}
	ids := map[string]bool{}
	var original time.Time
	var replayedAt []time.Time
	for _, a := range answers {
		switch {
		case a.err != nil:
			res.Errors++
			if res.FirstOther == "" {
				res.FirstOther = a.err.Error()
			}
		case a.r.status/100 == 2:
			var env struct {
				Meta struct {
					ExecutionID string `json:"executionId"`
				} `json:"meta"`
			}
			_ = json.Unmarshal(a.r.body, &env)
			ids[env.Meta.ExecutionID] = true
			if a.r.replayed {
				res.Replays++
				replayedAt = append(replayedAt, a.at)
			} else {
				res.Executions++
				original = a.at
			}
		case a.r.status == http.StatusConflict:
			res.InFlight++
		default:
			res.Other++
			if res.FirstOther == "" {
				res.FirstOther = fmt.Sprintf("%d %s", a.r.status, a.r.body)
			}
		}
	}
	res.ExecutionIDs = len(ids)
	if !original.IsZero() && len(replayedAt) > 0 {
		after := make([]time.Duration, len(replayedAt))
		for i, t := range replayedAt {
			if d := t.Sub(original); d > 0 {
				after[i] = d
			}
		}
		sort.Slice(after, func(i, j int) bool { return after[i] < after[j] })
		res.WaitP50Ms, res.WaitP99Ms, res.WaitMaxMs = ms(quantile(after, 0.5)), ms(quantile(after, 0.99)), ms(after[len(after)-1])
	}
	return res
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// progressMu guards the progress line.
var progressMu sync.Mutex

// stderrTTY says whether stderr is a terminal: then the progress line
// rewrites itself; otherwise each update is a line of its own.
var stderrTTY = func() bool {
	fi, err := os.Stderr.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}()

// progressf writes the progress line to stderr.
func progressf(format string, args ...any) {
	progressMu.Lock()
	defer progressMu.Unlock()
	if stderrTTY {
		fmt.Fprintf(os.Stderr, "\r\033[K[bench] "+format, args...)
	} else {
		fmt.Fprintf(os.Stderr, "[bench] "+format+"\n", args...)
	}
}

// progressDone ends the progress line.
func progressDone() {
	progressMu.Lock()
	defer progressMu.Unlock()
	if stderrTTY {
		fmt.Fprintln(os.Stderr)
	}
}

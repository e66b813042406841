// Command tracetail reads a Go execution trace of idem serve (IDEM_TRACE,
// cmd/idem/trace.go) and says where its slowest requests spent their time
// (docs/PERFORMANCE.md, "The tail (item 4)").
//
//	go run . trace.out
//
// A request is the time an HTTP connection's goroutine spends between two
// waits for the next request on its connection; only requests that waited
// on pgstore count (the store's requests, not the ceiling's). Each one's
// time is split by state: running, runnable (ready, no thread running it:
// the Go scheduler or the OS's), in a system call, waiting (by reason and
// the first github.com frame and first two idem frames of the waiting
// stack). It
// prints the median band's split and the slowest 1%'s, how many requests
// overlapped a GC mark phase, and the runnable waits of 3 ms or more.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

type request struct {
	g          trace.GoID
	start, end trace.Time
	by         map[string]time.Duration
	store      bool
}

func (r *request) d() time.Duration { return time.Duration(r.end - r.start) }

type goroutine struct {
	state trace.GoState
	since trace.Time
	label string
	req   *request
}

// idle reports whether s is a connection's goroutine waiting for its next
// request.
func idle(s trace.Stack) bool {
	str := s.String()
	return !strings.Contains(str, "ServeHTTP") && !strings.Contains(str, "finishRequest") &&
		(strings.Contains(str, "net/http.(*conn).readRequest") || strings.Contains(str, "net/http.(*conn).serve"))
}

func label(reason string, s trace.Stack) string {
	var gh string
	var idem []string
	for f := range s.Frames() {
		if gh == "" && strings.Contains(f.Func, "github.com/") {
			gh = short(f.Func)
		}
		if len(idem) < 2 && strings.Contains(f.Func, "idem-run/idem") {
			idem = append(idem, short(f.Func))
		}
	}
	l := reason + " @ " + gh
	for _, f := range idem {
		if f != gh {
			l += " < " + f
		}
	}
	return l
}

func short(f string) string {
	f = strings.ReplaceAll(f, "github.com/idem-run/idem/", "")
	return strings.ReplaceAll(f, "github.com/jackc/pgx/v5/", "pgx/")
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tracetail trace.out")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r, err := trace.NewReader(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var (
		t0, t1 trace.Time
		gs     = map[trace.GoID]*goroutine{}
		reqs   []*request
		marks  [][2]trace.Time // GC mark phases
		mark   trace.Time
		woken  = map[trace.GoID]trace.Time{}
		hist   [9]int
		bursts []string
	)
	for {
		ev, err := r.ReadEvent()
		if err != nil {
			break
		}
		now := ev.Time()
		if t0 == 0 {
			t0 = now
		}
		t1 = now
		switch ev.Kind() {
		case trace.EventRangeBegin, trace.EventRangeEnd:
			if rg := ev.Range(); rg.Name == "GC concurrent mark phase" {
				if ev.Kind() == trace.EventRangeBegin {
					mark = now
				} else if mark != 0 {
					marks = append(marks, [2]trace.Time{mark, now})
				}
			}
			continue
		case trace.EventStateTransition:
		default:
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		g := gs[id]
		if g == nil {
			g = &goroutine{state: from, since: now}
			gs[id] = g
		}
		if g.req != nil {
			var k string
			switch g.state {
			case trace.GoRunning:
				k = "running"
			case trace.GoRunnable:
				k = "runnable"
			case trace.GoSyscall:
				k = "syscall " + g.label
			case trace.GoWaiting:
				k = "wait " + g.label
			}
			g.req.by[k] += time.Duration(now - g.since)
			if strings.Contains(g.label, "pgstore") {
				g.req.store = true
			}
		}
		if to == trace.GoRunnable {
			woken[id] = now
		}
		if from == trace.GoRunnable && to == trace.GoRunning {
			if w, ok := woken[id]; ok {
				d := time.Duration(now - w)
				b := 0
				for d > time.Duration(1<<b)*100*time.Microsecond && b < len(hist)-1 {
					b++
				}
				hist[b]++
				if d >= 3*time.Millisecond {
					bursts = append(bursts, fmt.Sprintf("+%.4fs g%d runnable %v", time.Duration(w-t0).Seconds(), id, d.Round(time.Microsecond)))
				}
			}
		}
		switch {
		case to == trace.GoWaiting && idle(st.Stack):
			if g.req != nil {
				g.req.end = now
				reqs = append(reqs, g.req)
				g.req = nil
			}
			g.label = "idle"
		case from == trace.GoWaiting && g.label == "idle":
			g.req = &request{g: id, start: now, by: map[string]time.Duration{}}
			g.label = ""
		case to == trace.GoWaiting || to == trace.GoSyscall:
			g.label = label(st.Reason, st.Stack)
		}
		if to == trace.GoNotExist {
			delete(gs, id)
		}
		g.state, g.since = to, now
	}
	var store []*request
	for _, q := range reqs {
		if q.store {
			store = append(store, q)
		}
	}
	fmt.Printf("window %.2fs, %d GC mark phases, %d requests, %d on the store\n",
		time.Duration(t1-t0).Seconds(), len(marks), len(reqs), len(store))
	n := len(store)
	if n == 0 {
		return
	}
	sort.Slice(store, func(i, j int) bool { return store[i].d() < store[j].d() })
	q := func(p float64) time.Duration { return store[int(p*float64(n-1))].d().Round(time.Microsecond) }
	fmt.Printf("store requests: p50 %v p90 %v p99 %v max %v\n", q(.5), q(.9), q(.99), q(1))
	slow := store[n*99/100:]
	inGC := func(q *request) bool {
		for _, m := range marks {
			if q.start < m[1] && q.end > m[0] {
				return true
			}
		}
		return false
	}
	var all, ofSlow int
	for _, q := range store {
		if inGC(q) {
			all++
		}
	}
	for _, q := range slow {
		if inGC(q) {
			ofSlow++
		}
	}
	fmt.Printf("overlapping a GC mark phase: %d of %d (%.1f%%); of the slowest 1%%: %d of %d\n",
		all, n, 100*float64(all)/float64(n), ofSlow, len(slow))
	split("median band (p40-p60)", store[n*4/10:n*6/10])
	split("slowest 1%", slow)
	fmt.Println("\nslowest 1%, by start:")
	sort.Slice(slow, func(i, j int) bool { return slow[i].start < slow[j].start })
	for _, q := range slow {
		fmt.Printf("  +%.4fs g%d %v gc=%v\n", time.Duration(q.start-t0).Seconds(), q.g, q.d().Round(time.Microsecond), inGC(q))
	}
	fmt.Println("\nrunnable waits (every goroutine):")
	for b, c := range hist {
		fmt.Printf("  <= %v: %d\n", time.Duration(1<<b)*100*time.Microsecond, c)
	}
	fmt.Println("runnable waits of 3 ms or more:")
	for _, b := range bursts {
		fmt.Println("  " + b)
	}
}

// split prints the mean time per request of set by state.
func split(name string, set []*request) {
	tot := map[string]time.Duration{}
	var sum time.Duration
	for _, q := range set {
		for k, v := range q.by {
			tot[k] += v
		}
		sum += q.d()
	}
	keys := make([]string, 0, len(tot))
	for k := range tot {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return tot[keys[i]] > tot[keys[j]] })
	fmt.Printf("\n%s: %d requests, mean %.3f ms\n", name, len(set), float64(sum)/1e6/float64(len(set)))
	for i, k := range keys {
		if i == 12 {
			break
		}
		fmt.Printf("  %7.3f ms  %s\n", float64(tot[k])/1e6/float64(len(set)), k)
	}
}

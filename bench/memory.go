package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The memory mode (--memory N) measures what N concurrent request bodies
// of the largest size, made of many small objects, cost the server: it
// starts `idem serve --demo` on SQLite with its default settings (plus
// --serve-args), sends N such bodies at once, each client resending after
// Retry-After while it is answered 429, and reports the server's peak
// resident set (VmHWM) and the answers. docs/PERFORMANCE.md, "Admission
// control and memory".

// memoryShape is one kind of large body and the route it is sent to.
type memoryShape struct {
	name   string
	path   string
	prefix string // the body's other members
	field  string // the array of small objects
}

// memoryShapes: the demo has no operation whose schema accepts a 1 MiB
// array, so the arrays are well-formed JSON that the server decodes in
// full (fingerprint, argument object, schema validation) before refusing
// it: an unknown field (one schema error) and a field whose items are all
// wrong (one schema error per item, the most decoding work).
var memoryShapes = []memoryShape{
	{name: "unknown field", path: "/v1/businesses", prefix: `"slug":"mem","name":"mem"`, field: "items"},
	{name: "wrong items", path: "/v1/businesses/mem/webhooks", prefix: `"url":"https://example.com/hook"`, field: "events"},
}

// memoryBody is a JSON object of just under limit bytes whose field holds
// an array of {"a":N,"b":"x"}.
func memoryBody(shape memoryShape, limit int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{%s,"%s":[`, shape.prefix, shape.field)
	for i := 0; b.Len() < limit-32; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"a":%d,"b":"x"}`, i%10)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// memoryResult is one shape's run.
type memoryResult struct {
	shape    string
	baseline int64         // VmHWM before the load, bytes
	peak     int64         // VmHWM after it
	cpu      time.Duration // the server's CPU time over the load
	sends    int           // requests sent, resends included
	statuses map[int]int
	errors   int
	firstErr string
	elapsed  time.Duration
}

// runMemory runs every shape against a fresh server each (VmHWM only grows).
func runMemory(ctx context.Context, o options, tmp string) error {
	var results []memoryResult
	for i, shape := range memoryShapes {
		dir := filepath.Join(tmp, fmt.Sprintf("memory-%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		progressf("memory: %s: starting idem serve --demo", shape.name)
		srv, err := startServer(ctx, o.binary, "sqlite:"+filepath.Join(dir, "idem.db"), dir, o.serve)
		if err != nil {
			return err
		}
		r := memoryLoad(ctx, srv, shape, o.memory)
		srv.stop()
		results = append(results, r)
	}
	progressDone()
	fmt.Printf("%d concurrent bodies of %d bytes ({\"a\":N,\"b\":\"x\"} objects), `idem serve --demo` on SQLite, flags: %q\n\n",
		o.memory, len(memoryBody(memoryShapes[0], 1<<20)), strings.Join(o.serve, " "))
	fmt.Println("| body | RSS before (VmHWM) | peak RSS (VmHWM) | sends | answers | errors | seconds | server CPU s |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		codes := make([]int, 0, len(r.statuses))
		for c := range r.statuses {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		var answers []string
		for _, c := range codes {
			answers = append(answers, fmt.Sprintf("%d×%d", r.statuses[c], c))
		}
		fmt.Printf("| %s | %d MiB | %d MiB | %d | %s | %d | %.1f | %.1f |\n", r.shape, r.baseline>>20, r.peak>>20, r.sends, strings.Join(answers, " "), r.errors, r.elapsed.Seconds(), r.cpu.Seconds())
		if r.firstErr != "" {
			fmt.Printf("\nfirst error (%s): %s\n", r.shape, r.firstErr)
		}
	}
	return nil
}

// memoryLoad sends n bodies at once; a client answered 429 waits for
// Retry-After (1 s when absent) and sends again, up to 60 times.
func memoryLoad(ctx context.Context, srv *server, shape memoryShape, n int) memoryResult {
	pid := srv.cmd.Process.Pid
	res := memoryResult{shape: shape.name, statuses: map[int]int{}, baseline: vmHWM(pid)}
	cpu0 := readProc(pid).cpu
	body := memoryBody(shape, 1<<20)
	client := newClient(n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	release := make(chan struct{})
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			key := fmt.Sprintf("mem-%d", i)
			for range 60 {
				status, retryAfter, err := postMemory(ctx, client, srv.url+shape.path, key, body)
				mu.Lock()
				res.sends++
				if err != nil {
					res.errors++
					if res.firstErr == "" {
						res.firstErr = err.Error()
					}
				} else {
					res.statuses[status]++
				}
				mu.Unlock()
				if err != nil || status != http.StatusTooManyRequests {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(retryAfter):
				}
			}
		}()
	}
	close(release)
	wg.Wait()
	res.elapsed = time.Since(start)
	res.peak = vmHWM(pid)
	res.cpu = readProc(pid).cpu - cpu0
	return res
}

// postMemory sends one body and returns the status and Retry-After.
func postMemory(ctx context.Context, c *http.Client, url, key string, body []byte) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var sink bytes.Buffer
	_, err = sink.ReadFrom(resp.Body)
	retryAfter := time.Second
	if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
		retryAfter = time.Duration(s) * time.Second
	}
	return resp.StatusCode, retryAfter, err
}

// vmHWM is the process's peak resident set (VmHWM in /proc/PID/status), in
// bytes; 0 where /proc is not available.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

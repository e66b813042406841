package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/proxy"
	"github.com/idem-run/idem/sqlitestore"
)

// A proxied first keyed call costs idem's first execution of a handler
// outside the store's transaction and nothing more (issue 36 item 5): one
// Reserve, durable before the upstream is called, the one forward, one
// Complete; no read of the key first (no policy stands before the
// reservation), no fence check, no second write. Its replay costs no store
// call (the replay cache answers it) and no upstream call; the replay's
// audit event goes through the audit queue, off the request path, and is
// not counted here.
func TestProxiedFirstCallStoreCalls(t *testing.T) {
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), idem.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	var mu sync.Mutex
	var calls []string
	observed := idem.ObserveStore(store, func(ctx context.Context, method string) (context.Context, func(error)) {
		if method != "append_events" { // the audit queue's flushes, whenever they come
			mu.Lock()
			calls = append(calls, method)
			mu.Unlock()
		}
		return ctx, func(error) {}
	})
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(calls)
		calls = calls[:0]
		slices.Sort(out)
		return out
	}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"t1"}`))
	})
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	built, err := proxy.Build(loadDoc(t, keyedDoc), nil, proxy.Options{Forward: f.Handler, Upstream: f.Upstream})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := idem.NewRegistry(built.Operations...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{Store: observed})
	if err != nil {
		t.Fatal(err)
	}
	take() // whatever starting the runner read
	call := func(key string) idem.Result {
		return r.Call(t.Context(), idem.Invocation{Operation: "createThing", Surface: idem.SurfaceHTTP, Principal: agent,
			Key: key, Intent: idem.Intent{ContentType: "application/json", Body: []byte(`{"name":"a"}`)}})
	}
	for i := range 3 {
		key := fmt.Sprint("k-", i)
		if res := call(key); res.Status != 201 || res.Replayed {
			t.Fatalf("first call: %d %s", res.Status, res.Body())
		}
		if got, want := take(), []string{"complete", "reserve"}; !slices.Equal(got, want) {
			t.Errorf("first keyed call %d: store calls %v, want %v", i, got, want)
		}
		if res := call(key); res.Status != 201 || !res.Replayed {
			t.Fatalf("replay: %d %s", res.Status, res.Body())
		}
		if got := take(); len(got) != 0 {
			t.Errorf("replay %d: store calls %v, want none", i, got)
		}
	}
	if n := up.count.Load(); n != 3 {
		t.Errorf("the upstream was called %d times for 3 keys, want 3", n)
	}
}

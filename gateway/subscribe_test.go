package gateway_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// feed is an upstream with one resource that can be restarted on its
// address: a new process, as it were, that knows none of the sessions
// and subscriptions of the one before.
type feed struct {
	t    *testing.T
	addr string

	mu         sync.Mutex
	srv        *mcp.Server
	hs         *http.Server
	subscribes atomic.Int64 // resources/subscribe received, over every run
	// drops is how many resources/read requests to come are read and
	// then answered by closing the connection.
	drops atomic.Int64
}

const feedURI = "file:///feed.txt"

func newFeed(t *testing.T) *feed {
	t.Helper()
	f := &feed{t: t}
	f.start("127.0.0.1:0")
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.hs.Close()
	})
	return f
}

func (f *feed) url() string { return "http://" + f.addr + "/mcp" }

// start serves a new server on addr.
func (f *feed) start(addr string) {
	f.t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "feed", Version: "1"}, &mcp.ServerOptions{
		SubscribeHandler: func(context.Context, *mcp.SubscribeRequest) error {
			f.subscribes.Add(1)
			return nil
		},
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	srv.AddResource(&mcp.Resource{URI: feedURI, Name: "feed", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "news"}}}, nil
		})
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		f.t.Fatal(err)
	}
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"resources/read"`)) && f.drops.Add(-1) >= 0 {
			hijackClose(w)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sdk.ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	f.mu.Lock()
	f.srv, f.hs, f.addr = srv, hs, ln.Addr().String()
	f.mu.Unlock()
}

// restart stops the server, every connection with it, and serves a new
// one on the same address.
func (f *feed) restart() {
	f.t.Helper()
	f.mu.Lock()
	f.hs.Close()
	f.mu.Unlock()
	f.start(f.addr)
}

// update sends resources/updated to the sessions subscribed to the
// resource on the running server.
func (f *feed) update(ctx context.Context) {
	f.mu.Lock()
	srv := f.srv
	f.mu.Unlock()
	srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: feedURI})
}

// A client subscribed to a resource keeps getting its
// notifications/resources/updated after the upstream restarted: the
// gateway subscribes the new upstream session to what its clients still
// hold (issue 34: the subscription was lost with the session).
func TestGatewaySubscriptionSurvivesANewSession(t *testing.T) {
	f, cs, updated := subscribedToFeed(t)
	ctx := t.Context()
	// waitUpdate sends updates until one reaches the client.
	waitUpdate := func(when string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			f.update(ctx)
			select {
			case <-updated:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no resources/updated reached the subscribed client (the upstream got %d subscribes)", when, f.subscribes.Load())
			}
		}
	}
	waitUpdate("before the restart")

	// read is a request after a restart: it finds the session gone (404)
	// and makes a new one.
	read := func(when string) {
		t.Helper()
		if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: feedURI}); err != nil {
			t.Fatalf("resources/read %s: %v", when, err)
		}
	}
	f.restart()
	t.Log("the upstream restarted")
	read("after the restart")
	waitUpdate("after the restart")
	if n := f.subscribes.Load(); n != 2 {
		t.Fatalf("the upstream got %d subscribes, want 2 (one a session)", n)
	}

	// Unsubscribed, the new session is unsubscribed too: nothing comes.
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: feedURI}); err != nil {
		t.Fatal(err)
	}
	f.restart()
	read("after the second restart")
	if n := f.subscribes.Load(); n != 2 {
		t.Fatalf("the upstream got %d subscribes after the last unsubscribe, want 2", n)
	}
}

// TestGatewaySubscriptionComesBackWithoutARequest: a restarted upstream's
// session is made again as soon as the gateway sees the old one end,
// while a client holds a subscription, so that its updates come back with
// no request of any client. Before, they waited for the next request or
// the periodic re-list.
func TestGatewaySubscriptionComesBackWithoutARequest(t *testing.T) {
	f, _, updated := subscribedToFeed(t)
	ctx := t.Context()
	waitUpdate := func(when string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			f.update(ctx)
			select {
			case <-updated:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no resources/updated reached the subscribed client within %s (the upstream got %d subscribes)", when, within, f.subscribes.Load())
			}
		}
	}
	waitUpdate("before the restart", 10*time.Second)
	f.restart()
	t.Log("the upstream restarted; no client sends anything")
	waitUpdate("after the restart", 20*time.Second)
	if n := f.subscribes.Load(); n != 2 {
		t.Fatalf("the upstream got %d subscribes, want 2 (one a session)", n)
	}
}

// A read whose connection broke after the upstream read it (a kept
// connection the restarted upstream closed, or a drop) is sent once more:
// it is a read. Before, the client got "rejected by transport: EOF", as
// a read right after an upstream restart sometimes did.
func TestGatewayReadSentAgainAfterABrokenConnection(t *testing.T) {
	f := newFeed(t)
	url := startMerging(t, []*library{{url: f.url()}}, []string{""})
	cs := connect(t, url, nil)
	f.drops.Store(1)
	res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: feedURI})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "news" {
		t.Fatalf("resources/read with its first connection dropped: %v %+v", err, res)
	}
	// Dropped every time: the read fails after its one more sending.
	f.drops.Store(10)
	if _, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: feedURI}); err == nil {
		t.Fatal("resources/read succeeded with every connection dropped")
	}
	if left := f.drops.Load(); left != 8 {
		t.Fatalf("the upstream got %d reads, want 2 (the read and one more)", 10-left)
	}
}

// subscribedToFeed starts a feed upstream behind a gateway and a client
// subscribed to feedURI through it, cs; the client's resources/updated
// URIs arrive on updated.
func subscribedToFeed(t *testing.T) (f *feed, cs *mcp.ClientSession, updated chan string) {
	t.Helper()
	f = newFeed(t)
	url := startMerging(t, []*library{{url: f.url()}}, []string{""})
	updated = make(chan string, 100)
	cs = connect(t, url, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	})
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: feedURI}); err != nil {
		t.Fatal(err)
	}
	return f, cs, updated
}

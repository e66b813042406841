package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idem-run/idem"
)

// Issue 34 item 7 (g-gwsmall): Call reports a proxied upstream's plain
// answer of 400 or more, which idem ran and stored (Idempotency-Execution-Id
// set), as the upstream's answer, as CallResult does: not INTERNAL, not
// foreign, and not retried with the same key (a retry would replay it).
func TestCallUpstreamPlainAnswer(t *testing.T) {
	for _, status := range []int{404, 502} {
		sc := newScripted(t, func(n int, w http.ResponseWriter, r *http.Request) {
			w.Header().Set(idem.HeaderExecutionID, "exe_9")
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(status)
			io.WriteString(w, "404 page not found\n")
		})
		_, err := sc.client(t).Call(context.Background(), "order.refund", refundArgs(), CallOptions{IdempotencyKey: "k-1"})
		var e *Error
		if !errors.As(err, &e) || !e.Upstream() || e.Foreign() || e.Code == idem.CodeInternal || e.Status != status || e.Retryable ||
			e.Header.Get(idem.HeaderExecutionID) != "exe_9" || string(e.Problem) != "404 page not found\n" || e.Requests != 1 || e.IdempotencyKey != "k-1" {
			t.Fatalf("%d: err = %+v", status, err)
		}
		if want := fmt.Sprintf("the upstream answered %d %s: ", status, http.StatusText(status)); !strings.HasPrefix(e.Error(), want) {
			t.Errorf("%d: %q, want it to start %q", status, e.Error(), want)
		}
		if n := len(sc.seen()); n != 1 {
			t.Fatalf("%d: %d requests, want 1", status, n)
		}
	}
}

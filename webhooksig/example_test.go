package webhooksig_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"time"
)

import "github.com/idem-run/idem/webhooksig"

func handle(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	err = webhooksig.Verify(secret, r.Header.Get("Idem-Signature"), body, time.Now(), webhooksig.DefaultTolerance)
	if err != nil { // errors.Is: ErrMismatch, ErrTimestamp, ErrMalformed, ErrNoSignature, ErrNoV1
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}
	// … process, deduplicating on r.Header.Get("Idem-Delivery-Id") …
	w.WriteHeader(http.StatusNoContent)
}

// verifyByHand is the check of docs/webhooks.md written without this
// package, as a receiver in another language would.
func verifyByHand(secret string, t int64, signatures [][]byte, body []byte) bool {
	// header "t=1700000000,v1=…": parse t and every v1, then
	mac := hmac.New(sha256.New, []byte(secret)) // "whsec_…", the whole string
	fmt.Fprintf(mac, "%d.", t)
	mac.Write(body) // the raw body
	want := mac.Sum(nil)
	ok := false
	for _, v1 := range signatures { // hex-decoded
		if hmac.Equal(v1, want) {
			ok = true
		}
	}
	ok = ok && time.Since(time.Unix(t, 0)).Abs() <= 5*time.Minute
	return ok
}

var _ = []any{handle, verifyByHand}

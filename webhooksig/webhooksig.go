// Package webhooksig signs and verifies webhook deliveries the way Stripe
// signs them (SPEC §12). It is the one implementation shared by the demo's
// sender (webhook.trigger) and the local receiver (idem webhook listen).
//
// A delivery carries the header
//
//	Idem-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
//
// The HMAC key is the whole secret string as given to the receiver
// (whsec_… included); the signed message is the decimal timestamp, a dot
// and the raw request body, byte for byte as sent. Binding the timestamp
// into the MAC lets a receiver refuse replays of an old delivery.
package webhooksig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header names of a delivery.
const (
	// HeaderSignature carries t=…,v1=….
	HeaderSignature = "Idem-Signature"
	// HeaderDeliveryID carries the delivery's id (also the body's "id"); a
	// receiver deduplicates on it.
	HeaderDeliveryID = "Idem-Delivery-Id"
	// HeaderEventType carries the event type (also the body's "type").
	HeaderEventType = "Idem-Event-Type"
)

// DefaultTolerance is how far a delivery's timestamp may be from the
// receiver's clock: 5 minutes, as Stripe's libraries default to.
const DefaultTolerance = 5 * time.Minute

// Scheme is the only signature scheme: HMAC-SHA256.
const Scheme = "v1"

// Errors returned by Verify; match them with errors.Is. None of them
// contains the secret or the expected signature.
var (
	// ErrNoSignature: the header is empty.
	ErrNoSignature = errors.New("webhooksig: no signature header")
	// ErrMalformed: the header is not t=<unix seconds>,v1=<hex>[,…].
	ErrMalformed = errors.New("webhooksig: malformed signature header")
	// ErrNoV1: the header has a timestamp but no v1 signature.
	ErrNoV1 = errors.New("webhooksig: no v1 signature in header")
	// ErrTimestamp: the timestamp is further than the tolerance from now.
	ErrTimestamp = errors.New("webhooksig: timestamp outside the tolerance")
	// ErrMismatch: no v1 signature in the header matches the body.
	ErrMismatch = errors.New("webhooksig: signature does not match the body")
	// ErrNoSecret: Verify was called with an empty secret.
	ErrNoSecret = errors.New("webhooksig: empty secret")
)

// Sign returns the Idem-Signature header value for body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
func Sign(secret string, t time.Time, body []byte) string {
	ts := t.Unix()
	return "t=" + strconv.FormatInt(ts, 10) + "," + Scheme + "=" + hex.EncodeToString(mac(secret, ts, body))
}

// mac is HMAC-SHA256(secret, "<ts>.<body>").
func mac(secret string, ts int64, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(strconv.FormatInt(ts, 10)))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks header (the Idem-Signature value) against body and secret.
// The header may carry several v1 signatures (a sender rotating secrets);
// one match is enough, compared in constant time. Elements with another
// scheme are ignored. With tolerance > 0 the timestamp must be within
// tolerance of now, in either direction (an old delivery may be a replay,
// one from the future a clock problem); tolerance 0 skips that check.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if secret == "" {
		return ErrNoSecret
	}
	header = strings.TrimSpace(header)
	if header == "" {
		return ErrNoSignature
	}
	var (
		ts      int64
		haveTS  bool
		candSig [][]byte
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%w: element %q is not key=value", ErrMalformed, part)
		}
		switch k {
		case "t":
			if haveTS {
				return fmt.Errorf("%w: t given twice", ErrMalformed)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("%w: t is not unix seconds", ErrMalformed)
			}
			ts, haveTS = n, true
		case Scheme:
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return fmt.Errorf("%w: v1 is not %d hex bytes", ErrMalformed, sha256.Size)
			}
			candSig = append(candSig, sig)
		}
	}
	if !haveTS {
		return fmt.Errorf("%w: no t= timestamp", ErrMalformed)
	}
	if len(candSig) == 0 {
		return ErrNoV1
	}
	if tolerance > 0 {
		signed := time.Unix(ts, 0)
		switch d := now.Sub(signed); {
		case d > tolerance:
			return fmt.Errorf("%w: signed at %s, %s ago (tolerance %s)", ErrTimestamp,
				signed.UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
		case d < -tolerance:
			return fmt.Errorf("%w: signed at %s, %s in the future (tolerance %s)", ErrTimestamp,
				signed.UTC().Format(time.RFC3339), (-d).Round(time.Second), tolerance)
		}
	}
	want := mac(secret, ts, body)
	ok := false
	for _, sig := range candSig {
		// Check every candidate, so the time taken does not say which matched.
		if hmac.Equal(sig, want) {
			ok = true
		}
	}
	if !ok {
		return ErrMismatch
	}
	return nil
}

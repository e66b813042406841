package webhooksig_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idem-run/idem/webhooksig"
)

const (
	secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body   = `{"id":"dlv_1","type":"payment.succeeded"}`
	// opensslSig is
	//   printf '%s' '1700000000.{"id":"dlv_1","type":"payment.succeeded"}' |
	//     openssl dgst -sha256 -hmac whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw -hex
	opensslSig = "d3850618753e3a577748a47d6db1151ba4fcca44292b116a05d85d119f9a8195"
)

var signedAt = time.Unix(1700000000, 0)

// stripeStyle computes the header with crypto/hmac directly, the way a
// receiver following Stripe's documentation would.
func stripeStyle(secret string, t int64, body string) string {
	h := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(h, "%d.%s", t, body)
	return fmt.Sprintf("t=%d,v1=%s", t, hex.EncodeToString(h.Sum(nil)))
}

func TestSignVectors(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"openssl vector", webhooksig.Sign(secret, signedAt, []byte(body)), "t=1700000000,v1=" + opensslSig},
		{"crypto/hmac directly", webhooksig.Sign(secret, signedAt, []byte(body)), stripeStyle(secret, 1700000000, body)},
		{"sub-second time truncates", webhooksig.Sign(secret, signedAt.Add(999*time.Millisecond), []byte(body)), "t=1700000000,v1=" + opensslSig},
		{"empty body", webhooksig.Sign(secret, signedAt, nil), stripeStyle(secret, 1700000000, "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %s, want %s", tt.got, tt.want)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	good := "t=1700000000,v1=" + opensslSig
	other := stripeStyle("whsec_other", 1700000000, body)
	otherSig := other[strings.Index(other, "v1=")+3:]
	now := signedAt.Add(30 * time.Second)
	tests := []struct {
		name      string
		secret    string
		header    string
		body      string
		now       time.Time
		tolerance time.Duration
		want      error // nil: verifies
	}{
		{"valid", secret, good, body, now, webhooksig.DefaultTolerance, nil},
		{"valid, spaces around elements", secret, " t=1700000000 , v1=" + opensslSig + " ", body, now, webhooksig.DefaultTolerance, nil},
		{"valid among rotated signatures", secret, "t=1700000000,v1=" + otherSig + ",v1=" + opensslSig, body, now, webhooksig.DefaultTolerance, nil},
		{"unknown scheme ignored", secret, "t=1700000000,v0=abc,v1=" + opensslSig, body, now, webhooksig.DefaultTolerance, nil},
		{"exactly at tolerance", secret, good, body, signedAt.Add(5 * time.Minute), webhooksig.DefaultTolerance, nil},
		{"tolerance 0 skips the time check", secret, good, body, signedAt.Add(24 * time.Hour), 0, nil},
		{"wrong secret", "whsec_other", good, body, now, webhooksig.DefaultTolerance, webhooksig.ErrMismatch},
		{"body changed", secret, good, body + " ", now, webhooksig.DefaultTolerance, webhooksig.ErrMismatch},
		{"timestamp changed", secret, "t=1700000001,v1=" + opensslSig, body, now, webhooksig.DefaultTolerance, webhooksig.ErrMismatch},
		{"too old", secret, good, body, signedAt.Add(5*time.Minute + time.Second), webhooksig.DefaultTolerance, webhooksig.ErrTimestamp},
		{"too far in the future", secret, good, body, signedAt.Add(-6 * time.Minute), webhooksig.DefaultTolerance, webhooksig.ErrTimestamp},
		{"empty header", secret, "", body, now, webhooksig.DefaultTolerance, webhooksig.ErrNoSignature},
		{"no timestamp", secret, "v1=" + opensslSig, body, now, webhooksig.DefaultTolerance, webhooksig.ErrMalformed},
		{"timestamp twice", secret, "t=1,t=1700000000,v1=" + opensslSig, body, now, webhooksig.DefaultTolerance, webhooksig.ErrMalformed},
		{"timestamp not a number", secret, "t=yesterday,v1=" + opensslSig, body, now, webhooksig.DefaultTolerance, webhooksig.ErrMalformed},
		{"signature not hex", secret, "t=1700000000,v1=zz", body, now, webhooksig.DefaultTolerance, webhooksig.ErrMalformed},
		{"signature too short", secret, "t=1700000000,v1=" + opensslSig[:62], body, now, webhooksig.DefaultTolerance, webhooksig.ErrMalformed},
		{"element without =", secret, "t=1700000000,v1", body, now, webhooksig.DefaultTolerance, webhooksig.ErrMalformed},
		{"no v1", secret, "t=1700000000,v0=" + opensslSig, body, now, webhooksig.DefaultTolerance, webhooksig.ErrNoV1},
		{"empty secret", "", good, body, now, webhooksig.DefaultTolerance, webhooksig.ErrNoSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := webhooksig.Verify(tt.secret, tt.header, []byte(tt.body), tt.now, tt.tolerance)
			if tt.want == nil && err != nil {
				t.Fatalf("Verify = %v, want nil", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), tt.secret) && tt.secret != "" {
				t.Errorf("error %q reveals the secret", err)
			}
		})
	}
}

func TestSignThenVerify(t *testing.T) {
	now := time.Now()
	b := []byte(`{"id":"dlv_x","type":"refund.created","createdAt":"2024-01-01T00:00:00Z","data":{}}`)
	h := webhooksig.Sign(secret, now, b)
	if err := webhooksig.Verify(secret, h, b, now, webhooksig.DefaultTolerance); err != nil {
		t.Fatal(err)
	}
}

func ExampleVerify() {
	body := []byte(`{"id":"dlv_1","type":"payment.succeeded"}`)
	header := webhooksig.Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", time.Unix(1700000000, 0), body)
	fmt.Println(header)
	err := webhooksig.Verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", header, body, time.Unix(1700000060, 0), webhooksig.DefaultTolerance)
	fmt.Println("verified:", err == nil)
	err = webhooksig.Verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", header, body, time.Unix(1700000000+3600, 0), webhooksig.DefaultTolerance)
	fmt.Println(err)
	// Output:
	// t=1700000000,v1=d3850618753e3a577748a47d6db1151ba4fcca44292b116a05d85d119f9a8195
	// verified: true
	// webhooksig: timestamp outside the tolerance: signed at 2023-11-14T22:13:20Z, 1h0m0s ago (tolerance 5m0s)
}

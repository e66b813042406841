package jwtauth_test

import (
	"errors"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
)

// FuzzAuthenticate: whatever bearer token arrives, Authenticate neither
// panics nor accepts it (the fuzzer cannot sign), and answers either
// unrecognized or a recognized UNAUTHENTICATED refusal.
func FuzzAuthenticate(f *testing.F) {
	clock := fakeclock.New(start)
	rs := rsaKey(f, "rsa-1")
	is := newIssuer(f, rs)
	a := newAuth(f, is.config(clock))
	valid := rs.sign(f, claims(start, nil))
	for _, seed := range []string{valid, valid[:len(valid)-3] + "abc", "t-agent", "a.b.c", "eyJhbGciOiJub25lIn0.e30.", "eyJhbGciOiJSUzI1NiIsImtpZCI6InJzYS0xIn0.e30.AAAA", "x.y.z.w.v"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		p, err := a.Authenticate(bearer(token))
		if token == valid {
			return
		}
		if err == nil {
			t.Fatalf("accepted %q as %+v", token, p)
		}
		var e *idem.Error
		if !errors.As(err, &e) || e.Code != idem.CodeUnauthenticated {
			t.Fatalf("%q: %v is not UNAUTHENTICATED", token, err)
		}
	})
}

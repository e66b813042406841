package idem_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idem-run/idem"
)

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		name         string
		headers      []string
		want         string
		unrecognized bool // no bearer credential at all
	}{
		{name: "a bearer token", headers: []string{"Bearer tok-1"}, want: "tok-1"},
		{name: "the scheme in any case", headers: []string{"bearer  tok-1 "}, want: "tok-1"},
		{name: "no header", unrecognized: true},
		{name: "another scheme", headers: []string{"Basic dTpw"}, unrecognized: true},
		{name: "an empty token", headers: []string{"Bearer "}, unrecognized: true},
		{name: "two headers", headers: []string{"Bearer a", "Bearer b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			for _, h := range tc.headers {
				r.Header.Add("Authorization", h)
			}
			got, err := idem.BearerToken(r)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("BearerToken = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("BearerToken = %q, want an error", got)
			}
			if idem.ErrorCode(err) != idem.CodeUnauthenticated || idem.IsUnrecognized(err) != tc.unrecognized {
				t.Fatalf("error %v: code %s, unrecognized %v; want UNAUTHENTICATED, unrecognized %v", err, idem.ErrorCode(err), idem.IsUnrecognized(err), tc.unrecognized)
			}
		})
	}
}

func TestAuthenticatorsChain(t *testing.T) {
	alice := idem.Principal{Org: "o", ID: "alice", Kind: idem.KindAgent}
	notMine := idem.AuthenticatorFunc(func(*http.Request) (idem.Principal, error) {
		return idem.Principal{}, idem.Unrecognized(idem.Errorf(idem.CodeUnauthenticated, "not mine"))
	})
	refuses := idem.AuthenticatorFunc(func(*http.Request) (idem.Principal, error) {
		return idem.Principal{}, idem.Errorf(idem.CodeUnauthenticated, "expired")
	})
	accepts := idem.AuthenticatorFunc(func(*http.Request) (idem.Principal, error) { return alice, nil })
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for _, tc := range []struct {
		name    string
		chain   idem.Authenticators
		want    idem.Principal
		wantMsg string
	}{
		{name: "the next one accepts", chain: idem.Authenticators{notMine, accepts}, want: alice},
		{name: "a refusal ends the chain", chain: idem.Authenticators{refuses, accepts}, wantMsg: "expired"},
		{name: "a refusal after a not-mine", chain: idem.Authenticators{notMine, refuses}, wantMsg: "expired"},
		{name: "nobody recognizes it: the first error", chain: idem.Authenticators{notMine, notMine}, wantMsg: "not mine"},
		{name: "an empty chain refuses", chain: nil, wantMsg: "no caller can authenticate: this server accepts no credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.chain.Authenticate(r)
			if tc.wantMsg == "" {
				if err != nil || p.ID != tc.want.ID {
					t.Fatalf("Authenticate = %+v, %v; want %+v", p, err, tc.want)
				}
				return
			}
			var e *idem.Error
			if !errors.As(err, &e) || e.Message != tc.wantMsg {
				t.Fatalf("Authenticate error = %v, want %q", err, tc.wantMsg)
			}
		})
	}
}

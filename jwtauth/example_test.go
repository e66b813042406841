package jwtauth_test

import (
	"context"
	"log"
	"net/http"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/jwtauth"
)

// An embedding application accepts its tokens file, JWTs from its
// identity provider, and callers its gateway has authenticated, in that
// order: each authenticator marks a request it has no credential for as
// idem.Unrecognized, and the chain asks the next.
func ExampleNew() {
	ctx := context.Background()
	claims, err := jwtauth.ParseClaimMap("org=tenant,sub=sub,kind=idem_kind,roles=groups")
	if err != nil {
		log.Fatal(err)
	}
	jwtAuth, err := jwtauth.New(ctx, jwtauth.Config{
		JWKSURL:  "https://login.example.com/.well-known/jwks.json",
		Issuer:   "https://login.example.com/",
		Audience: "https://idem.example.com",
		Claims:   claims,
	})
	if err != nil {
		log.Fatal(err) // the key set cannot be fetched, or the config is wrong
	}
	tokens := httpapi.NewTokens(map[string]idem.Principal{
		"t-ci": {Org: "acme", ID: "ci", Kind: idem.KindServiceAccount},
	})
	// Only behind a gateway that sets these headers itself and strips them
	// from what clients send.
	gateway := idem.AuthenticatorFunc(func(r *http.Request) (idem.Principal, error) {
		org, user := r.Header.Get("X-Gateway-Org"), r.Header.Get("X-Gateway-User")
		if user == "" {
			return idem.Principal{}, idem.Unrecognized(idem.Errorf(idem.CodeUnauthenticated, "no gateway identity"))
		}
		return idem.Principal{Org: org, ID: user, Kind: idem.KindBrowser}, nil
	})
	// For services with client certificates (docs/auth.md).
	mtls := idem.AuthenticatorFunc(func(r *http.Request) (idem.Principal, error) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			return idem.Principal{}, idem.Unrecognized(idem.Errorf(idem.CodeUnauthenticated, "no client certificate"))
		}
		cert := r.TLS.VerifiedChains[0][0]
		if len(cert.Subject.Organization) != 1 || cert.Subject.CommonName == "" {
			return idem.Principal{}, idem.Errorf(idem.CodeUnauthenticated, "the client certificate must name one O (the org) and a CN (the service)")
		}
		return idem.Principal{Org: cert.Subject.Organization[0], ID: cert.Subject.CommonName, Kind: idem.KindServiceAccount}, nil
	})
	auth := idem.Authenticators{tokens, jwtAuth, gateway, mtls}
	_ = httpapi.Config{Auth: auth} // with Runner, Store…: httpapi.NewHandler(cfg)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/idem-run/idem/jwtauth"
)

// jwtOptions are the flags that accept JWT bearer tokens verified against
// an issuer's key set (idem serve, idem proxy).
type jwtOptions struct {
	jwksURL    string
	issuer     string
	audience   string
	claims     string
	algorithms []string
	leeway     time.Duration
}

// jwtFlagOf names the flag of each jwtauth.Config field, for its errors.
var jwtFlagOf = map[string]string{
	"JWKSURL":            "--jwks-url",
	"Issuer":             "--jwt-issuer",
	"Audience":           "--jwt-audience",
	"Algorithms":         "--jwt-algorithms",
	"Leeway":             "--jwt-leeway",
	"Claims.DefaultKind": "--jwt-claims default_kind",
}

// flags declares the JWT flags on f.
func (o *jwtOptions) flags(f *pflag.FlagSet) {
	f.StringVar(&o.jwksURL, "jwks-url", "", "also accept JWT bearer tokens signed with a key of this JSON Web Key Set: the issuer's jwks_uri, https (env IDEM_JWKS_URL); needs --jwt-issuer and --jwt-audience")
	f.StringVar(&o.issuer, "jwt-issuer", "", "the iss claim a JWT must carry (env IDEM_JWT_ISSUER)")
	f.StringVar(&o.audience, "jwt-audience", "", "the aud claim a JWT must include (env IDEM_JWT_AUDIENCE)")
	f.StringVar(&o.claims, "jwt-claims", "", "the claims a JWT's principal is read from, as org=CLAIM,sub=CLAIM,kind=CLAIM,roles=CLAIM,default_kind=KIND; a dotted CLAIM reaches into objects (env IDEM_JWT_CLAIMS; default org=org,sub=sub,kind=kind,roles=roles,default_kind=agent)")
	f.StringSliceVar(&o.algorithms, "jwt-algorithms", slices.Clone(jwtauth.DefaultAlgorithms), "signature algorithms (alg) a JWT may use, of "+strings.Join(jwtauth.SupportedAlgorithms, ", "))
	f.DurationVar(&o.leeway, "jwt-leeway", jwtauth.DefaultLeeway, "clock skew allowed on a JWT's exp, nbf and iat, at most "+jwtauth.MaxLeeway.String()+" (0: none)")
}

// jwtDefaults fills the JWT options from the environment where their
// flags were not given.
func (m Main) jwtDefaults(o *jwtOptions) {
	for _, v := range []struct {
		dst *string
		env string
	}{{&o.jwksURL, "IDEM_JWKS_URL"}, {&o.issuer, "IDEM_JWT_ISSUER"}, {&o.audience, "IDEM_JWT_AUDIENCE"}, {&o.claims, "IDEM_JWT_CLAIMS"}} {
		if *v.dst == "" {
			*v.dst = m.Getenv(v.env)
		}
	}
}

// logJWT says at start-up that JWTs are accepted, from whom and with how
// many keys, and where MCP clients are told to get a token.
func logJWT(logger *slog.Logger, a *jwtauth.Authenticator, publicURL string) {
	cfg := a.Config()
	logger.Info("JWT auth on", "issuer", cfg.Issuer, "audience", cfg.Audience, "keys", a.KeyCount(), "jwksUrl", cfg.JWKSURL)
	if publicURL == "" {
		logger.Info("no --public-url: the protected resource metadata that names the JWT issuer to MCP clients (/.well-known/oauth-protected-resource) is served " +
			"only to requests for a loopback host (localhost, 127.0.0.1); give --public-url https://… (env IDEM_PUBLIC_URL) when clients reach this server by another name")
	}
}

// authenticator returns the JWT authenticator the options ask for, its
// key set fetched once, or nil without --jwks-url. Both --jwt-issuer and
// --jwt-audience are required with it: without the issuer, any issuer
// signing with keys of a shared key set would be accepted; without the
// audience, a token the issuer minted for another service.
func (o jwtOptions) authenticator(ctx context.Context) (*jwtauth.Authenticator, error) {
	if o.jwksURL == "" {
		for _, f := range []struct{ name, value string }{{"--jwt-issuer", o.issuer}, {"--jwt-audience", o.audience}, {"--jwt-claims", o.claims}} {
			if f.value != "" {
				return nil, usagef("%s is given without --jwks-url (env IDEM_JWKS_URL): give the issuer's key set URL too, or drop %s", f.name, f.name)
			}
		}
		return nil, nil
	}
	claims, err := jwtauth.ParseClaimMap(o.claims)
	if err != nil {
		return nil, usagef("--jwt-claims: %v", err)
	}
	if o.leeway < 0 {
		return nil, usagef("--jwt-leeway must be 0 or more, got %s", o.leeway)
	}
	leeway := o.leeway
	if leeway == 0 {
		leeway = -1 // jwtauth: negative is none, 0 the default
	}
	a, err := jwtauth.New(ctx, jwtauth.Config{
		JWKSURL: o.jwksURL, Issuer: o.issuer, Audience: o.audience,
		Algorithms: o.algorithms, Leeway: leeway, Claims: claims,
	})
	var ce *jwtauth.ConfigError
	switch {
	case errors.As(err, &ce):
		flag := jwtFlagOf[ce.Field]
		if flag == "" {
			flag = ce.Field
		}
		return nil, usagef("%s %s", flag, ce.Problem)
	case err != nil:
		return nil, fmt.Errorf("--jwks-url: %w", err)
	}
	return a, nil
}

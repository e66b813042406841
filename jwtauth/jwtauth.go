// Package jwtauth is an idem.Authenticator for JWT bearer tokens signed by
// an identity provider and verified against its published key set (JWKS).
//
// A token is accepted when its signature verifies with a key of the set
// (found by the header's kid), its alg is on the allow-list, its iss and
// aud are the configured ones, and exp (required), nbf and iat hold within
// the leeway. The principal is read from claims named by a ClaimMap.
//
// Signatures and the key set are handled by go-jose; this package decides
// only which key, which algorithms and which claims. A bearer token that
// is not a JWT is marked idem.Unrecognized, so that in an
// idem.Authenticators chain the next authenticator (the tokens file) is
// asked; a JWT that fails is refused with a message that says why.
package jwtauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/canonical"
)

// Authenticator verifies JWT bearer tokens. It is safe for concurrent use
// and has nothing to close: the key set is refreshed when requests find it
// due, each fetch in a goroutine that ends within Config.FetchTimeout,
// while requests whose key is cached are answered without waiting for it.
type Authenticator struct {
	cfg  Config
	algs []jose.SignatureAlgorithm
	keys *keySet
}

var (
	_ idem.Authenticator = (*Authenticator)(nil)
	_ idem.TokenIssuers  = (*Authenticator)(nil)
)

// New checks cfg and fetches the key set once, so that a wrong URL or an
// unreadable set fails at start-up rather than as a 401 for every caller.
func New(ctx context.Context, cfg Config) (*Authenticator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("jwtauth: %w", err)
	}
	a := &Authenticator{cfg: cfg, keys: &keySet{
		url: cfg.JWKSURL, client: cfg.HTTPClient, timeout: cfg.FetchTimeout, now: cfg.Clock,
		refresh: cfg.RefreshInterval, minRefresh: cfg.MinRefreshInterval,
	}}
	for _, alg := range cfg.Algorithms {
		a.algs = append(a.algs, jose.SignatureAlgorithm(alg))
	}
	if err := a.keys.load(ctx); err != nil {
		return nil, err // names the URL and what went wrong
	}
	return a, nil
}

// Config returns the configuration in force, defaults filled in.
func (a *Authenticator) Config() Config { return a.cfg }

// AuthorizationServers implements idem.TokenIssuers: the issuer.
func (a *Authenticator) AuthorizationServers() []string { return []string{a.cfg.Issuer} }

// KeyCount returns how many usable keys the cached key set holds.
func (a *Authenticator) KeyCount() int {
	a.keys.mu.Lock()
	defer a.keys.mu.Unlock()
	return len(a.keys.keys)
}

// header is the part of a JOSE header read before verification, to choose
// the key and to tell a JWT from another kind of bearer token.
type header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Enc string `json:"enc"`
}

// peek reads the header of a compact-serialized JWS (three parts) or JWE
// (five). ok is false for anything else: an opaque token.
func peek(token string) (h header, parts int, ok bool) {
	parts = strings.Count(token, ".") + 1
	if parts != 3 && parts != 5 {
		return h, parts, false
	}
	first, _, _ := strings.Cut(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(first)
	if err != nil || json.Unmarshal(b, &h) != nil || h.Alg == "" {
		return h, parts, false
	}
	return h, parts, true
}

// Authenticate implements idem.Authenticator.
func (a *Authenticator) Authenticate(r *http.Request) (idem.Principal, error) {
	token, err := idem.BearerToken(r)
	if err != nil {
		return idem.Principal{}, err
	}
	h, parts, ok := peek(token)
	if !ok {
		return idem.Principal{}, idem.Unrecognized(idem.Errorf(idem.CodeUnauthenticated, "the bearer token is not a JWT"))
	}
	if parts == 5 || h.Enc != "" {
		return idem.Principal{}, refuse(nil, "the token is an encrypted JWT (JWE); this server accepts signed JWTs (JWS) only")
	}
	if !a.allowed(h.Alg) {
		return idem.Principal{}, refuse(nil, "the token's algorithm alg=%s is not accepted; this server accepts %s", quote(h.Alg), strings.Join(a.cfg.Algorithms, ", "))
	}
	tok, err := jwt.ParseSigned(token, a.algs)
	if err != nil {
		return idem.Principal{}, refuse(err, "the token is not a well-formed signed JWT (JWS compact serialization); get a new one from the issuer")
	}
	key, err := a.keys.lookup(r.Context(), h.Kid, h.Alg)
	if err != nil {
		var le *lookupError
		if errors.As(err, &le) {
			return idem.Principal{}, refuse(le.err, "%s", le.msg)
		}
		return idem.Principal{}, refuse(err, "the token's key cannot be found")
	}
	var std jwt.Claims
	claims := map[string]any{}
	err = tok.Claims(key.Key, &std, &claims)
	if errors.Is(err, jose.ErrCryptoFailure) && h.Kid != "" {
		// The issuer may have put a new key behind the same kid.
		if next, ok := a.keys.replacement(r.Context(), h.Kid, h.Alg, key); ok {
			key, err = next, tok.Claims(next.Key, &std, &claims)
		}
	}
	if err != nil {
		if errors.Is(err, jose.ErrCryptoFailure) {
			return idem.Principal{}, refuse(err, "the token's signature does not verify with the issuer's key kid=%s; get a new token from the issuer", quote(key.KeyID))
		}
		return idem.Principal{}, refuse(err, "the token's claims cannot be read: exp, nbf and iat must be numbers, aud a string or an array of strings")
	}
	if err := a.validate(std); err != nil {
		return idem.Principal{}, err
	}
	p, err := a.principal(claims)
	if err == nil && std.Expiry != nil {
		p.Expires = std.Expiry.Time().UTC() // a console session ends with the token
	}
	return p, err
}

func (a *Authenticator) allowed(alg string) bool {
	for _, x := range a.cfg.Algorithms {
		if x == alg {
			return true
		}
	}
	return false
}

// validate checks the registered claims, in go-jose's order, and says
// what is wrong in the claims' own terms.
func (a *Authenticator) validate(c jwt.Claims) error {
	if c.Expiry == nil {
		return refuse(nil, "the token has no expiry (exp); this server accepts only tokens that expire")
	}
	now := a.cfg.Clock()
	err := c.ValidateWithLeeway(jwt.Expected{Issuer: a.cfg.Issuer, AnyAudience: jwt.Audience{a.cfg.Audience}, Time: now}, a.cfg.Leeway)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return refuse(err, "the token's issuer (iss) is %s, not %s; get a token from %s", quote(c.Issuer), quote(a.cfg.Issuer), a.cfg.Issuer)
	case errors.Is(err, jwt.ErrInvalidAudience) && len(c.Audience) == 0:
		return refuse(err, "the token has no audience (aud); get a token for audience %s", a.cfg.Audience)
	case errors.Is(err, jwt.ErrInvalidAudience):
		return refuse(err, "the token's audience (aud) %s does not include %s; get a token for audience %s", quoteList(c.Audience), quote(a.cfg.Audience), a.cfg.Audience)
	case errors.Is(err, jwt.ErrNotValidYet):
		return refuse(err, "the token is not valid before %s (nbf), more than the leeway of %s from now (%s); check the clocks of the issuer and of this server", stamp(c.NotBefore.Time()), a.cfg.Leeway, stamp(now))
	case errors.Is(err, jwt.ErrExpired):
		return refuse(err, "the token expired at %s (exp), more than the leeway of %s ago (now %s); get a new one", stamp(c.Expiry.Time()), a.cfg.Leeway, stamp(now))
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return refuse(err, "the token was issued at %s (iat), more than the leeway of %s after now (%s); check the clocks of the issuer and of this server", stamp(c.IssuedAt.Time()), a.cfg.Leeway, stamp(now))
	}
	return refuse(err, "the token's claims are not valid")
}

// principal maps verified claims to the principal.
func (a *Authenticator) principal(claims map[string]any) (idem.Principal, error) {
	m := a.cfg.Claims
	org, err := requiredString(claims, m.Org, "org")
	if err != nil {
		return idem.Principal{}, err
	}
	id, err := requiredString(claims, m.Subject, "principal id")
	if err != nil {
		return idem.Principal{}, err
	}
	p := idem.Principal{Org: org, ID: id, Kind: m.DefaultKind}
	if v, ok := claim(claims, m.Kind); ok {
		s, _ := v.(string)
		if !idem.PrincipalKind(s).Valid() {
			return idem.Principal{}, refuse(nil, "the token's claim %s (the principal kind) is %s, not one of %s", quote(m.Kind), describe(v), idem.PrincipalKindList)
		}
		p.Kind = idem.PrincipalKind(s)
	}
	if v, ok := claim(claims, m.Roles); ok {
		switch v := v.(type) {
		case string:
			p.Roles = strings.Fields(v)
		case []any:
			for _, r := range v {
				s, ok := r.(string)
				if !ok {
					return idem.Principal{}, refuse(nil, "the token's claim %s (the roles) holds %s; it must be an array of strings or a space-separated string", quote(m.Roles), describe(r))
				}
				p.Roles = append(p.Roles, s)
			}
		case nil:
		default:
			return idem.Principal{}, refuse(nil, "the token's claim %s (the roles) is %s; it must be an array of strings or a space-separated string", quote(m.Roles), describe(v))
		}
	}
	for _, r := range p.Roles {
		if err := canonical.CheckString(r); err != nil {
			return idem.Principal{}, refuse(nil, "the token's claim %s (the roles) cannot hold a role: %v", quote(m.Roles), err)
		}
	}
	return p, nil
}

// requiredString reads a claim that must be a non-empty string.
func requiredString(claims map[string]any, name, what string) (string, error) {
	v, ok := claim(claims, name)
	if !ok {
		return "", refuse(nil, "the token has no claim %s (the %s); the issuer must set it, or --jwt-claims must name the claim that holds it", quote(name), what)
	}
	s, _ := v.(string)
	if s == "" {
		return "", refuse(nil, "the token's claim %s (the %s) is %s; it must be a non-empty string", quote(name), what, describe(v))
	}
	if err := canonical.CheckString(s); err != nil { // what a store cannot hold: refused here, 401, never a store's 500
		return "", refuse(nil, "the token's claim %s (the %s) cannot name a principal: %v", quote(name), what, err)
	}
	return s, nil
}

// claim looks name up as one claim, then, when absent and dotted, as a
// path through nested objects.
func claim(claims map[string]any, name string) (any, bool) {
	if v, ok := claims[name]; ok {
		return v, true
	}
	if !strings.Contains(name, ".") {
		return nil, false
	}
	var cur any = claims
	for part := range strings.SplitSeq(name, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// refuse is the UNAUTHENTICATED answer to a JWT this authenticator
// recognized and refuses; cause is kept for logs, never shown.
func refuse(cause error, format string, args ...any) error {
	e := idem.Errorf(idem.CodeUnauthenticated, format, args...)
	e.Err = cause
	return e
}

// quote quotes a value taken from a token, cut to a length that keeps
// messages readable.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		s = s[:max] + "…"
	}
	return fmt.Sprintf("%q", s)
}

func quoteList(ss []string) string {
	if len(ss) == 0 {
		return "(none)"
	}
	q := make([]string, 0, min(len(ss), 5))
	for i, s := range ss {
		if i == 5 {
			q = append(q, "…")
			break
		}
		q = append(q, quote(s))
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// describe names a claim value that has the wrong type or is empty.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if v == "" {
			return "empty"
		}
		return quote(v)
	case bool:
		return "a boolean"
	case float64, json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "not a string"
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

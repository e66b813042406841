package jwtauth

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idem-run/idem"
)

// Defaults of Config.
const (
	// DefaultLeeway is how far past exp (and before nbf and iat) a token
	// is still accepted, for clock skew between the issuer and this server.
	DefaultLeeway = 60 * time.Second
	// MaxLeeway bounds Leeway: beyond it exp stops meaning much.
	MaxLeeway = 5 * time.Minute
	// DefaultRefreshInterval is how old the cached key set may grow before
	// the next request refetches it.
	DefaultRefreshInterval = 15 * time.Minute
	// DefaultMinRefreshInterval is the least time between two fetches of
	// the key set, whatever kid the tokens name.
	DefaultMinRefreshInterval = 10 * time.Second
	// DefaultFetchTimeout bounds one fetch of the key set.
	DefaultFetchTimeout = 10 * time.Second
	// MaxKeySetBytes bounds the key set document.
	MaxKeySetBytes = 1 << 20
)

// DefaultAlgorithms are the signature algorithms accepted when
// Config.Algorithms is empty: the two that identity providers sign with
// by default (RS256 almost everywhere, ES256 where keys are elliptic).
var DefaultAlgorithms = []string{"RS256", "ES256"}

// SupportedAlgorithms are the algorithms Config.Algorithms may name: the
// asymmetric JWS algorithms, whose keys a public key set can carry. The
// HMAC algorithms (HS256…) are refused, since their key is a shared
// secret that a JWKS must never publish, and "none" signs nothing.
var SupportedAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Config configures an Authenticator.
type Config struct {
	// JWKSURL is where the issuer publishes its public keys (a JSON Web
	// Key Set, RFC 7517 §5): https, or http on a loopback host. Required.
	JWKSURL string
	// Issuer must equal the token's iss claim. Required: without it, any
	// issuer signing with keys of this set (a key set shared by the
	// tenants of one provider) would be accepted.
	Issuer string
	// Audience must be one of the token's aud claim. Required: without
	// it, a token the same issuer minted for another service would be
	// accepted here.
	Audience string
	// Algorithms is the allow-list of the header's alg; DefaultAlgorithms
	// when empty. Each must be one of SupportedAlgorithms.
	Algorithms []string
	// Leeway is the allowed clock skew on exp, nbf and iat; DefaultLeeway
	// when 0, none when negative, at most MaxLeeway.
	Leeway time.Duration
	// Claims maps the token's claims to the principal.
	Claims ClaimMap
	// RefreshInterval is how old the cached key set may grow before the
	// next request starts refetching it (in the background: that request
	// and the others are answered with the cached keys meanwhile);
	// DefaultRefreshInterval when 0.
	RefreshInterval time.Duration
	// MinRefreshInterval is the least time between the starts of two
	// fetches of the key set: a token naming an unknown kid, or whose
	// signature does not verify with the cached key of its kid, refetches
	// the set (the issuer may have rotated or replaced its keys) only when
	// the last fetch started at least this long ago, so tokens with
	// made-up kids or signatures cannot make this server hammer the
	// issuer. DefaultMinRefreshInterval when 0; at most RefreshInterval.
	MinRefreshInterval time.Duration
	// FetchTimeout bounds one fetch of the key set, and so the wait of a
	// token whose key is not cached; DefaultFetchTimeout when 0.
	FetchTimeout time.Duration
	// HTTPClient fetches the key set; http.DefaultClient when nil.
	HTTPClient *http.Client
	// Clock returns the current time; time.Now when nil.
	Clock func() time.Time
}

// ClaimMap names the claims a principal is read from. A name is first
// looked up as one claim; when the token has no claim of that name, a name
// with dots is followed through nested objects ("realm_access.roles"), so
// that both namespaced claims ("https://example.com/org") and nested ones
// work.
type ClaimMap struct {
	// Org names the claim of the principal's org (a non-empty string);
	// "org" when empty. Required in each token.
	Org string
	// Subject names the claim of the principal's id (a non-empty string);
	// "sub" when empty. Required in each token.
	Subject string
	// Kind names the claim of the principal's kind, one of agent,
	// cli_session, service_account, browser; "kind" when empty. A token
	// without it is of DefaultKind.
	Kind string
	// DefaultKind is the kind of a token without the Kind claim; agent
	// when empty (the strictest: agents must send idempotency keys).
	DefaultKind idem.PrincipalKind
	// Roles names the claim of the principal's roles, an array of strings
	// or one space-separated string (like OAuth's scope); "roles" when
	// empty. A token without it has no roles.
	Roles string
}

// ParseClaimMap reads a claim map as the --jwt-claims flag gives it:
// comma-separated key=claim pairs with keys org, sub, kind, roles and
// default_kind (a kind, not a claim name), for example
// "org=tenant,sub=sub,kind=idem_kind,roles=groups". Keys not given keep
// their defaults.
func ParseClaimMap(s string) (ClaimMap, error) {
	var m ClaimMap
	seen := map[string]bool{}
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return ClaimMap{}, fmt.Errorf("%q is not key=claim; give pairs like org=tenant,sub=sub,kind=idem_kind,roles=groups", pair)
		}
		if seen[k] {
			return ClaimMap{}, fmt.Errorf("key %q is given twice", k)
		}
		seen[k] = true
		switch k {
		case "org":
			m.Org = v
		case "sub":
			m.Subject = v
		case "kind":
			m.Kind = v
		case "roles":
			m.Roles = v
		case "default_kind":
			m.DefaultKind = idem.PrincipalKind(v)
		default:
			return ClaimMap{}, fmt.Errorf("key %q is not one of org, sub, kind, roles, default_kind", k)
		}
	}
	return m, nil
}

// String formats m as ParseClaimMap reads it.
func (m ClaimMap) String() string {
	return fmt.Sprintf("org=%s,sub=%s,kind=%s,roles=%s,default_kind=%s", m.Org, m.Subject, m.Kind, m.Roles, m.DefaultKind)
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if len(c.Algorithms) == 0 {
		c.Algorithms = slices.Clone(DefaultAlgorithms)
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultLeeway
	} else if c.Leeway < 0 {
		c.Leeway = 0
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.MinRefreshInterval == 0 {
		c.MinRefreshInterval = min(DefaultMinRefreshInterval, c.RefreshInterval)
	}
	if c.FetchTimeout == 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Claims.Org == "" {
		c.Claims.Org = "org"
	}
	if c.Claims.Subject == "" {
		c.Claims.Subject = "sub"
	}
	if c.Claims.Kind == "" {
		c.Claims.Kind = "kind"
	}
	if c.Claims.DefaultKind == "" {
		c.Claims.DefaultKind = idem.KindAgent
	}
	if c.Claims.Roles == "" {
		c.Claims.Roles = "roles"
	}
	return c
}

// ConfigError is a field of Config that cannot work. Its Error is the
// field's name followed by Problem, so that a command line can name its
// flag instead (--jwks-url for JWKSURL).
type ConfigError struct {
	Field   string // JWKSURL, Issuer, Audience, Algorithms, Leeway, RefreshInterval, MinRefreshInterval, FetchTimeout, Claims.DefaultKind
	Problem string // "is required: …", "\"HS256\" is not one of …"
}

func (e *ConfigError) Error() string { return e.Field + " " + e.Problem }

func configErrorf(field, format string, args ...any) error {
	return &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// validate reports the first field of c (after WithDefaults) that cannot
// work, as a *ConfigError.
func (c Config) validate() error {
	if c.JWKSURL == "" {
		return configErrorf("JWKSURL", "is required: the URL of the issuer's key set (jwks_uri in its /.well-known/openid-configuration)")
	}
	u, err := url.Parse(c.JWKSURL)
	if err != nil || u.Host == "" {
		return configErrorf("JWKSURL", "%q is not an absolute URL", c.JWKSURL)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && isLoopback(u.Hostname()):
	default:
		return configErrorf("JWKSURL", "%q must be https (http only on a loopback host): keys fetched in the clear can be swapped on the way", c.JWKSURL)
	}
	if c.Issuer == "" {
		return configErrorf("Issuer", "is required: the iss claim of the issuer's tokens (without it, another issuer signing with keys of a shared key set would be accepted)")
	}
	if c.Audience == "" {
		return configErrorf("Audience", "is required: the aud claim of tokens meant for this server (without it, a token the issuer minted for another service would be accepted)")
	}
	for _, alg := range c.Algorithms {
		if !slices.Contains(SupportedAlgorithms, alg) {
			return configErrorf("Algorithms", "%q is not one of %s (HMAC and none cannot be verified with a public key set)", alg, strings.Join(SupportedAlgorithms, ", "))
		}
	}
	if c.Leeway > MaxLeeway {
		return configErrorf("Leeway", "%s is more than %s", c.Leeway, MaxLeeway)
	}
	for name, d := range map[string]time.Duration{"RefreshInterval": c.RefreshInterval, "MinRefreshInterval": c.MinRefreshInterval, "FetchTimeout": c.FetchTimeout} {
		if d < 0 {
			return configErrorf(name, "%s must be positive", d)
		}
	}
	if c.MinRefreshInterval > c.RefreshInterval {
		return configErrorf("MinRefreshInterval", "%s is more than RefreshInterval %s", c.MinRefreshInterval, c.RefreshInterval)
	}
	if !c.Claims.DefaultKind.Valid() {
		return configErrorf("Claims.DefaultKind", "%q is not one of %s", c.Claims.DefaultKind, idem.PrincipalKindList)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

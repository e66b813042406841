package jwtauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/jwtauth"
)

const (
	testIssuer   = "https://login.example.com/"
	testAudience = "https://idem.example.com"
)

var start = time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)

// signingKey is a private key the test issuer signs with.
type signingKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv any
}

func rsaKey(t testing.TB, kid string) signingKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return signingKey{kid: kid, alg: jose.RS256, priv: k}
}

func ecKey(t testing.TB, kid string) signingKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signingKey{kid: kid, alg: jose.ES256, priv: k}
}

func edKey(t testing.TB, kid string) signingKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signingKey{kid: kid, alg: jose.EdDSA, priv: k}
}

// public is the key as the issuer publishes it.
func (k signingKey) public() jose.JSONWebKey {
	jwk := jose.JSONWebKey{Key: k.priv, KeyID: k.kid, Use: "sig", Algorithm: string(k.alg)}
	return jwk.Public()
}

// sign serializes claims as a JWT signed with k (kid in the header unless
// k.kid is empty).
func (k signingKey) sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	var key any = k.priv
	if k.kid != "" {
		key = jose.JSONWebKey{Key: k.priv, KeyID: k.kid}
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// signRaw signs payload as it is, to send claims a JWT library would not
// build.
func signRaw(t testing.TB, k signingKey, payload string) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	token, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// issuer serves a JWKS over HTTP and counts its fetches.
type issuer struct {
	srv    *httptest.Server
	hits   atomic.Int64
	mu     sync.Mutex
	keys   []jose.JSONWebKey
	status int
	raw    []byte        // served instead of keys when set
	hang   chan struct{} // when set, a fetch waits for it to close
	// hanging receives a value for each fetch that hangs (buffered).
	hanging chan struct{}
}

func newIssuer(t testing.TB, keys ...signingKey) *issuer {
	t.Helper()
	is := &issuer{status: http.StatusOK, hanging: make(chan struct{}, 100)}
	is.publish(keys...)
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.hits.Add(1)
		is.mu.Lock()
		hang := is.hang
		is.mu.Unlock()
		if hang != nil { // a key endpoint that does not answer until released
			select {
			case is.hanging <- struct{}{}:
			default:
			}
			select {
			case <-hang:
			case <-r.Context().Done():
				return
			}
		}
		is.mu.Lock()
		defer is.mu.Unlock()
		if is.status != http.StatusOK {
			http.Error(w, "down", is.status)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		if is.raw != nil {
			_, _ = w.Write(is.raw)
			return
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: is.keys})
	}))
	t.Cleanup(is.srv.Close)
	return is
}

// publish replaces the served key set.
func (is *issuer) publish(keys ...signingKey) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = nil
	for _, k := range keys {
		is.keys = append(is.keys, k.public())
	}
}

func (is *issuer) setStatus(code int) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.status = code
}

func (is *issuer) url() string { return is.srv.URL + "/.well-known/jwks.json" }

// config is a Config for is, on clock.
func (is *issuer) config(clock *fakeclock.Clock) jwtauth.Config {
	return jwtauth.Config{JWKSURL: is.url(), Issuer: testIssuer, Audience: testAudience, HTTPClient: is.srv.Client(), Clock: clock.Now}
}

func newAuth(t testing.TB, cfg jwtauth.Config) *jwtauth.Authenticator {
	t.Helper()
	a, err := jwtauth.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// claims are valid claims at now, with over applied on top (a nil value
// deletes the claim).
func claims(now time.Time, over map[string]any) map[string]any {
	c := map[string]any{
		"iss": testIssuer, "aud": testAudience, "sub": "agent-7", "org": "acme",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func bearer(token string) *http.Request {
	r := httptest.NewRequest("GET", "/v1/operations", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// refused checks that err is a recognized UNAUTHENTICATED refusal whose
// message contains each of want and never the token.
func refused(t *testing.T, token string, err error, want ...string) {
	t.Helper()
	var e *idem.Error
	if !errors.As(err, &e) || e.Code != idem.CodeUnauthenticated {
		t.Fatalf("want an UNAUTHENTICATED error, got %v", err)
	}
	if idem.IsUnrecognized(err) {
		t.Fatalf("a JWT refused is marked unrecognized (a chain would ask the next authenticator): %v", err)
	}
	t.Logf("refused: %s", e.Message)
	for _, w := range want {
		if !strings.Contains(e.Message, w) {
			t.Fatalf("message %q does not say %q", e.Message, w)
		}
	}
	if payload := strings.Split(token, ".")[1]; strings.Contains(e.Message, token) || len(payload) > 16 && strings.Contains(e.Message, payload) {
		t.Fatalf("message echoes the token: %q", e.Message)
	}
}

func TestValidTokens(t *testing.T) {
	clock := fakeclock.New(start)
	rs, ec, ed := rsaKey(t, "rsa-1"), ecKey(t, "ec-1"), edKey(t, "ed-1")
	is := newIssuer(t, rs, ec, ed)
	cfg := is.config(clock)
	cfg.Algorithms = []string{"RS256", "ES256", "EdDSA"}
	a := newAuth(t, cfg)
	for _, k := range []signingKey{rs, ec, ed} {
		t.Run(string(k.alg), func(t *testing.T) {
			p, err := a.Authenticate(bearer(k.sign(t, claims(clock.Now(), map[string]any{"roles": []string{"approver"}}))))
			if err != nil {
				t.Fatal(err)
			}
			want := idem.Principal{Org: "acme", ID: "agent-7", Kind: idem.KindAgent, Roles: []string{"approver"}}
			if p.Org != want.Org || p.ID != want.ID || p.Kind != want.Kind || !slices.Equal(p.Roles, want.Roles) {
				t.Fatalf("principal %+v, want %+v", p, want)
			}
			if exp := time.Unix(clock.Now().Add(time.Hour).Unix(), 0); !p.Expires.Equal(exp) {
				t.Fatalf("principal expires %s, want the token's exp %s (a console session ends then)", p.Expires, exp)
			}
		})
	}
	t.Run("aud as an array", func(t *testing.T) {
		if _, err := a.Authenticate(bearer(rs.sign(t, claims(clock.Now(), map[string]any{"aud": []string{"other", testAudience}})))); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no kid, one key for the alg", func(t *testing.T) {
		noKid := rs
		noKid.kid = ""
		if _, err := a.Authenticate(bearer(noKid.sign(t, claims(clock.Now(), nil)))); err != nil {
			t.Fatal(err)
		}
	})
	if n := is.hits.Load(); n != 1 {
		t.Fatalf("the key set was fetched %d times, want once (at New)", n)
	}
}

func TestRefusedTokens(t *testing.T) {
	clock := fakeclock.New(start)
	rs, ec := rsaKey(t, "rsa-1"), ecKey(t, "ec-1")
	is := newIssuer(t, rs, ec, rsaKey(t, "rsa-2"))
	a := newAuth(t, is.config(clock))
	now := clock.Now()
	stranger := rsaKey(t, "rsa-1") // same kid, another key

	none := func() string {
		enc := base64.RawURLEncoding.EncodeToString
		h, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT", "kid": "rsa-1"})
		c, _ := json.Marshal(claims(now, nil))
		return enc(h) + "." + enc(c) + "."
	}
	// alg confusion: HS256 keyed with the RSA public key's bytes, which a
	// verifier that takes the key type from the header would accept.
	confused := func() string {
		der, err := x509.MarshalPKIXPublicKey(&rs.priv.(*rsa.PrivateKey).PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
		return signingKey{kid: "rsa-1", alg: jose.HS256, priv: pemBytes}.sign(t, claims(now, nil))
	}
	esWithRSAKid := func() string {
		k := ec
		k.kid = "rsa-1"
		return k.sign(t, claims(now, nil))
	}
	noKid := func() string {
		k := rs
		k.kid = ""
		return k.sign(t, claims(now, nil))
	}
	jwe := func() string {
		enc := base64.RawURLEncoding.EncodeToString
		h, _ := json.Marshal(map[string]string{"alg": "RSA-OAEP", "enc": "A256GCM"})
		return enc(h) + ".a.b.c.d"
	}

	for _, c := range []struct {
		name  string
		token string
		want  []string
	}{
		{"expired", rs.sign(t, claims(now, map[string]any{"exp": now.Add(-2 * time.Minute).Unix()})), []string{"the token expired at 2026-12-02T05:58:00Z (exp)", "get a new one"}},
		{"not yet valid", rs.sign(t, claims(now, map[string]any{"nbf": now.Add(2 * time.Minute).Unix()})), []string{"not valid before 2026-12-02T06:02:00Z (nbf)"}},
		{"issued in the future", rs.sign(t, claims(now, map[string]any{"iat": now.Add(2 * time.Minute).Unix()})), []string{"issued at 2026-12-02T06:02:00Z (iat)"}},
		{"no exp", rs.sign(t, claims(now, map[string]any{"exp": nil})), []string{"no expiry (exp)"}},
		{"wrong audience", rs.sign(t, claims(now, map[string]any{"aud": "https://other.example.com"})), []string{`the token's audience (aud) ["https://other.example.com"] does not include "https://idem.example.com"`}},
		{"no audience", rs.sign(t, claims(now, map[string]any{"aud": nil})), []string{"the token has no audience (aud); get a token for audience https://idem.example.com"}},
		{"wrong issuer", rs.sign(t, claims(now, map[string]any{"iss": "https://evil.example.com/"})), []string{`the token's issuer (iss) is "https://evil.example.com/", not "https://login.example.com/"`}},
		{"alg none", none(), []string{`alg="none" is not accepted`, "RS256, ES256"}},
		{"HS256 with the public key as secret", confused(), []string{`alg="HS256" is not accepted`}},
		{"unknown kid", (signingKey{kid: "nope", alg: jose.RS256, priv: rs.priv}).sign(t, claims(now, nil)), []string{`kid="nope" is not in the issuer's key set`}},
		{"bad signature", stranger.sign(t, claims(now, nil)), []string{`signature does not verify with the issuer's key kid="rsa-1"`}},
		{"kid of a key of another type", esWithRSAKid(), []string{`key kid="rsa-1" does not sign with the token's alg=ES256`}},
		{"no kid, two keys", noKid(), []string{"names no key id (kid)", "2 keys for alg=RS256"}},
		{"encrypted", jwe(), []string{"encrypted JWT (JWE)"}},
		{"signature not base64url", func() string {
			p := strings.Split(rs.sign(t, claims(now, nil)), ".")
			return p[0] + "." + p[1] + ".!!!"
		}(), []string{"not a well-formed signed JWT"}},
		// Text no store can hold is refused at authentication (401), not
		// by the store as a 500 (issue 28, item 10).
		{"NUL in sub", rs.sign(t, claims(now, map[string]any{"sub": "agent\x007"})), []string{`the token's claim "sub" (the principal id) cannot name a principal`, "NUL"}},
		{"NUL in org", rs.sign(t, claims(now, map[string]any{"org": "ac\x00me"})), []string{`the token's claim "org" (the org) cannot name a principal`, "NUL"}},
		{"NUL in a role", rs.sign(t, claims(now, map[string]any{"roles": []any{"approver\x00"}})), []string{`(the roles) cannot hold a role`, "NUL"}},
		{"exp not a number", signRaw(t, rs, `{"iss":"https://login.example.com/","exp":"tomorrow"}`), []string{"claims cannot be read: exp, nbf and iat must be numbers"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.Authenticate(bearer(c.token))
			refused(t, c.token, err, c.want...)
		})
	}
}

// TestLeeway: exp, nbf and iat hold within the leeway, to the second, on
// the injected clock.
func TestLeeway(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1")
	is := newIssuer(t, rs)
	cfg := is.config(clock)
	cfg.RefreshInterval = 24 * time.Hour
	a := newAuth(t, cfg)
	if got := a.Config().Leeway; got != 60*time.Second {
		t.Fatalf("default leeway %s, want 60s", got)
	}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	cases := []struct {
		name   string
		claims map[string]any
		now    time.Time
		ok     bool
	}{
		{"exp: 60 s past", claims(start.Add(-time.Hour), map[string]any{"exp": start.Unix()}), at(60 * time.Second), true},
		{"exp: 61 s past", claims(start.Add(-time.Hour), map[string]any{"exp": start.Unix()}), at(61 * time.Second), false},
		{"nbf: 60 s ahead", claims(start, map[string]any{"nbf": start.Add(60 * time.Second).Unix(), "iat": nil}), start, true},
		{"nbf: 61 s ahead", claims(start, map[string]any{"nbf": start.Add(61 * time.Second).Unix(), "iat": nil}), start, false},
		{"iat: 60 s ahead", claims(start, map[string]any{"iat": start.Add(60 * time.Second).Unix(), "nbf": nil}), start, true},
		{"iat: 61 s ahead", claims(start, map[string]any{"iat": start.Add(61 * time.Second).Unix(), "nbf": nil}), start, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock.Advance(c.now.Sub(clock.Now()))
			token := rs.sign(t, c.claims)
			_, err := a.Authenticate(bearer(token))
			if c.ok && err != nil {
				t.Fatalf("refused inside the leeway: %v", err)
			}
			if !c.ok {
				refused(t, token, err, "leeway of 1m0s")
			}
		})
	}

	t.Run("no leeway", func(t *testing.T) {
		clock := fakeclock.New(start)
		cfg := is.config(clock)
		cfg.Leeway = -1
		a := newAuth(t, cfg)
		clock.Advance(time.Second)
		token := rs.sign(t, claims(start.Add(-time.Hour), map[string]any{"exp": start.Unix()}))
		_, err := a.Authenticate(bearer(token))
		refused(t, token, err, "leeway of 0s")
	})
}

// TestRotation: a token signed with a key the issuer published after the
// last fetch is accepted once the set is refetched; the refetch happens on
// the unknown kid, at most once per MinRefreshInterval.
func TestRotation(t *testing.T) {
	clock := fakeclock.New(start)
	old, next := rsaKey(t, "2026-11"), rsaKey(t, "2026-12")
	is := newIssuer(t, old)
	a := newAuth(t, is.config(clock))

	is.publish(old, next)
	token := next.sign(t, claims(clock.Now(), nil))
	_, err := a.Authenticate(bearer(token))
	refused(t, token, err, `kid="2026-12" is not in the issuer's key set as fetched at 2026-12-02T06:00:00Z; if the issuer rotated its keys since, retry after 2026-12-02T06:00:10Z`)
	if n := is.hits.Load(); n != 1 {
		t.Fatalf("%d fetches within MinRefreshInterval of the first, want 1", n)
	}

	clock.Advance(jwtauth.DefaultMinRefreshInterval)
	token = next.sign(t, claims(clock.Now(), nil))
	if _, err := a.Authenticate(bearer(token)); err != nil {
		t.Fatalf("the rotated key is not found after the refetch: %v", err)
	}
	if n := is.hits.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
	// The old key still verifies while the issuer publishes it.
	if _, err := a.Authenticate(bearer(old.sign(t, claims(clock.Now(), nil)))); err != nil {
		t.Fatal(err)
	}

	// The issuer drops the old key: after RefreshInterval the next request
	// refetches the set, without waiting for it (its key is cached), and
	// once the refresh landed tokens of the old key are refused.
	is.publish(next)
	clock.Advance(jwtauth.DefaultRefreshInterval)
	if _, err := a.Authenticate(bearer(old.sign(t, claims(clock.Now(), nil)))); err != nil {
		t.Fatalf("a cached key while its set is refreshed: %v", err)
	}
	jwtauth.WaitForRefresh(a)
	token = old.sign(t, claims(clock.Now(), nil))
	_, err = a.Authenticate(bearer(token))
	refused(t, token, err, `kid="2026-11" is not in the issuer's key set as fetched at 2026-12-02T06:15:10Z; if the issuer rotated its keys since, retry after 2026-12-02T06:15:20Z`)
	if n := is.hits.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3 (one refresh for age; the unknown kid right after it does not fetch again)", n)
	}
}

// TestUnknownKidRateLimit: tokens naming kids the issuer never published
// cannot make this server fetch the key set more than once per
// MinRefreshInterval, however many arrive, and however concurrently.
func TestUnknownKidRateLimit(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1")
	is := newIssuer(t, rs)
	a := newAuth(t, is.config(clock))

	min := jwtauth.DefaultMinRefreshInterval
	clock.Advance(min)
	for round := int64(1); round <= 3; round++ {
		var tokens []string
		for i := range 50 {
			k := rs
			k.kid = fmt.Sprintf("random-%d-%d", round, i)
			tokens = append(tokens, k.sign(t, claims(clock.Now(), nil)))
		}
		var wg sync.WaitGroup
		for _, token := range tokens {
			wg.Go(func() {
				_, err := a.Authenticate(bearer(token))
				var e *idem.Error
				if !errors.As(err, &e) || !strings.Contains(e.Message, "is not in the issuer's key set") {
					t.Errorf("unknown kid: %v", err)
				}
			})
		}
		wg.Wait()
		if n := is.hits.Load(); n != 1+round {
			t.Fatalf("round %d: %d fetches, want %d (one per MinRefreshInterval)", round, n, 1+round)
		}
		clock.Advance(min - time.Second)
		k := rs
		k.kid = "later"
		_, _ = a.Authenticate(bearer(k.sign(t, claims(clock.Now(), nil))))
		if n := is.hits.Load(); n != 1+round {
			t.Fatalf("round %d: %d fetches within MinRefreshInterval of the last, want %d", round, n, 1+round)
		}
		clock.Advance(time.Second)
	}
}

// TestIssuerOutage: while the key set cannot be fetched, tokens of keys
// already known are accepted; an unknown kid says the set could not be
// refreshed.
func TestIssuerOutage(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1")
	is := newIssuer(t, rs)
	a := newAuth(t, is.config(clock))
	is.setStatus(http.StatusBadGateway)
	clock.Advance(jwtauth.DefaultRefreshInterval)
	if _, err := a.Authenticate(bearer(rs.sign(t, claims(clock.Now(), nil)))); err != nil {
		t.Fatalf("a known key is refused while the issuer is down: %v", err)
	}
	jwtauth.WaitForRefresh(a)
	clock.Advance(jwtauth.DefaultMinRefreshInterval)
	k := rs
	k.kid = "rsa-2"
	token := k.sign(t, claims(clock.Now(), nil))
	_, err := a.Authenticate(bearer(token))
	refused(t, token, err, `kid="rsa-2" is not in the issuer's key set as fetched at 2026-12-02T06:00:00Z: the key set could not be fetched again; retry after 2026-12-02T06:15:20Z`)
	if n := is.hits.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3", n)
	}
}

func TestClaimMapping(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1")
	is := newIssuer(t, rs)
	cfg := is.config(clock)
	var err error
	cfg.Claims, err = jwtauth.ParseClaimMap("org=https://idem.example.com/org, sub=email, kind=idem_kind, roles=realm_access.roles")
	if err != nil {
		t.Fatal(err)
	}
	a := newAuth(t, cfg)
	now := clock.Now()
	base := map[string]any{"org": nil, "https://idem.example.com/org": "acme", "email": "ci@acme.example", "sub": "0f3a"}
	with := func(over map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range over {
			m[k] = v
		}
		return claims(now, m)
	}

	for _, c := range []struct {
		name string
		over map[string]any
		want idem.Principal
	}{
		{"nested roles array, kind claim", map[string]any{"idem_kind": "service_account", "realm_access": map[string]any{"roles": []string{"approver", "reader"}}},
			idem.Principal{Org: "acme", ID: "ci@acme.example", Kind: idem.KindServiceAccount, Roles: []string{"approver", "reader"}}},
		{"roles as a space-separated string", map[string]any{"realm_access.roles": "approver reader"},
			idem.Principal{Org: "acme", ID: "ci@acme.example", Kind: idem.KindAgent, Roles: []string{"approver", "reader"}}},
		{"no kind, no roles: the default kind", nil,
			idem.Principal{Org: "acme", ID: "ci@acme.example", Kind: idem.KindAgent}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := a.Authenticate(bearer(rs.sign(t, with(c.over))))
			if err != nil {
				t.Fatal(err)
			}
			if p.Org != c.want.Org || p.ID != c.want.ID || p.Kind != c.want.Kind || !slices.Equal(p.Roles, c.want.Roles) {
				t.Fatalf("principal %+v, want %+v", p, c.want)
			}
		})
	}

	for _, c := range []struct {
		name string
		over map[string]any
		want string
	}{
		{"missing org", map[string]any{"https://idem.example.com/org": nil}, `the token has no claim "https://idem.example.com/org" (the org)`},
		{"empty org", map[string]any{"https://idem.example.com/org": ""}, `claim "https://idem.example.com/org" (the org) is empty`},
		{"missing subject", map[string]any{"email": nil}, `no claim "email" (the principal id)`},
		{"subject not a string", map[string]any{"email": 42}, `claim "email" (the principal id) is a number`},
		{"bad kind", map[string]any{"idem_kind": "robot"}, `claim "idem_kind" (the principal kind) is "robot", not one of agent, cli_session, service_account, browser`},
		{"roles of numbers", map[string]any{"realm_access": map[string]any{"roles": []any{1}}}, `claim "realm_access.roles" (the roles) holds a number`},
		{"roles an object", map[string]any{"realm_access": map[string]any{"roles": map[string]any{}}}, `(the roles) is an object`},
	} {
		t.Run(c.name, func(t *testing.T) {
			token := rs.sign(t, with(c.over))
			_, err := a.Authenticate(bearer(token))
			refused(t, token, err, c.want)
		})
	}

	t.Run("default_kind", func(t *testing.T) {
		m, err := jwtauth.ParseClaimMap("default_kind=service_account")
		if err != nil {
			t.Fatal(err)
		}
		cfg := is.config(clock)
		cfg.Claims = m
		p, err := newAuth(t, cfg).Authenticate(bearer(rs.sign(t, claims(now, nil))))
		if err != nil || p.Kind != idem.KindServiceAccount {
			t.Fatalf("principal %+v, %v: want kind service_account", p, err)
		}
	})
}

func TestParseClaimMap(t *testing.T) {
	for _, c := range []struct {
		in, want, err string
	}{
		{in: "", want: "org=,sub=,kind=,roles=,default_kind="},
		{in: "org=tenant,sub=sub,kind=idem_kind,roles=groups", want: "org=tenant,sub=sub,kind=idem_kind,roles=groups,default_kind="},
		{in: " roles = scope , default_kind=browser", want: "org=,sub=,kind=,roles=scope,default_kind=browser"},
		{in: "org", err: `"org" is not key=claim`},
		{in: "org=", err: `"org=" is not key=claim`},
		{in: "tenant=org", err: `key "tenant" is not one of org, sub, kind, roles, default_kind`},
		{in: "org=a,org=b", err: `key "org" is given twice`},
	} {
		t.Run(c.in, func(t *testing.T) {
			m, err := jwtauth.ParseClaimMap(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || m.String() != c.want {
				t.Fatalf("%q, %v; want %q", m.String(), err, c.want)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1")
	is := newIssuer(t, rs)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	for _, c := range []struct {
		name string
		edit func(*jwtauth.Config)
		want string
	}{
		{"no URL", func(c *jwtauth.Config) { c.JWKSURL = "" }, "JWKSURL is required"},
		{"http elsewhere", func(c *jwtauth.Config) { c.JWKSURL = "http://login.example.com/jwks" }, "must be https"},
		{"no issuer", func(c *jwtauth.Config) { c.Issuer = "" }, "Issuer is required"},
		{"no audience", func(c *jwtauth.Config) { c.Audience = "" }, "Audience is required"},
		{"HS256", func(c *jwtauth.Config) { c.Algorithms = []string{"RS256", "HS256"} }, `Algorithms "HS256" is not one of`},
		{"none", func(c *jwtauth.Config) { c.Algorithms = []string{"none"} }, `Algorithms "none" is not one of`},
		{"leeway", func(c *jwtauth.Config) { c.Leeway = time.Hour }, "Leeway 1h0m0s is more than 5m0s"},
		{"refresh", func(c *jwtauth.Config) { c.RefreshInterval, c.MinRefreshInterval = time.Second, 10*time.Second }, "MinRefreshInterval 10s is more than RefreshInterval 1s"},
		{"default kind", func(c *jwtauth.Config) { c.Claims.DefaultKind = "robot" }, `Claims.DefaultKind "robot"`},
		{"unreachable", func(c *jwtauth.Config) { c.JWKSURL = downURL + "/jwks" }, "the key set at " + downURL + "/jwks cannot be fetched"},
		{"not found", func(c *jwtauth.Config) { c.JWKSURL = notFound.URL + "/missing" }, "answered 404 Not Found, not 200 OK"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := is.config(clock)
			c.edit(&cfg)
			_, err := jwtauth.New(t.Context(), cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}

	for _, c := range []struct {
		name string
		raw  string
		want string
	}{
		{"not JSON", "<html>", "is not a JSON Web Key Set"},
		{"only a symmetric key", `{"keys":[{"kty":"oct","kid":"h","k":"c2VjcmV0"}]}`, `keys[0] (kid="h") is a symmetric (oct) key`},
		{"an encryption key", func() string {
			k := rs.public()
			k.Use = "enc"
			b, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{k}})
			return string(b)
		}(), `is for use "enc", not sig`},
		{"too large", `{"keys":[` + strings.Repeat(" ", jwtauth.MaxKeySetBytes) + `]}`, "is larger than 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			is.mu.Lock()
			is.raw = []byte(c.raw)
			is.mu.Unlock()
			_, err := jwtauth.New(t.Context(), is.config(clock))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}

	t.Run("one odd key does not hide the others", func(t *testing.T) {
		good, _ := json.Marshal(rs.public())
		is.mu.Lock()
		is.raw = []byte(`{"keys":[{"kty":"XYZ","kid":"odd"},{"kty":"oct","kid":"h","k":"c2VjcmV0"},` + string(good) + `]}`)
		is.mu.Unlock()
		a := newAuth(t, is.config(clock))
		if _, err := a.Authenticate(bearer(rs.sign(t, claims(clock.Now(), nil)))); err != nil {
			t.Fatal(err)
		}
	})
}

// TestChain: in an idem.Authenticators chain with the tokens file first,
// an opaque token goes to the tokens file, a JWT to this authenticator,
// and a refused JWT is not passed on.
func TestChain(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1")
	is := newIssuer(t, rs)
	jwtAuth := newAuth(t, is.config(clock))
	tokens := httpapi.NewTokens(map[string]idem.Principal{"t-agent": {Org: "acme", ID: "agent-1", Kind: idem.KindAgent}})

	_, err := jwtAuth.Authenticate(bearer("t-agent"))
	if !idem.IsUnrecognized(err) {
		t.Fatalf("an opaque token is not unrecognized: %v", err)
	}
	for _, opaque := range []string{"a.b.c", "x.eyJ9.y", "eyJhbGciOiJSUzI1NiJ9.e30"} {
		if _, err := jwtAuth.Authenticate(bearer(opaque)); !idem.IsUnrecognized(err) {
			t.Fatalf("%q is not unrecognized: %v", opaque, err)
		}
	}
	_, err = jwtAuth.Authenticate(httptest.NewRequest("GET", "/", nil))
	if !idem.IsUnrecognized(err) {
		t.Fatalf("no Authorization header is not unrecognized: %v", err)
	}

	for _, chain := range []idem.Authenticators{{tokens, jwtAuth}, {jwtAuth, tokens}} {
		if p, err := chain.Authenticate(bearer("t-agent")); err != nil || p.ID != "agent-1" {
			t.Fatalf("tokens-file token through the chain: %+v, %v", p, err)
		}
		if p, err := chain.Authenticate(bearer(rs.sign(t, claims(clock.Now(), nil)))); err != nil || p.ID != "agent-7" {
			t.Fatalf("JWT through the chain: %+v, %v", p, err)
		}
		expired := rs.sign(t, claims(clock.Now(), map[string]any{"exp": clock.Now().Add(-time.Hour).Unix()}))
		_, err := chain.Authenticate(bearer(expired))
		refused(t, expired, err, "the token expired at")
		if _, err := chain.Authenticate(bearer("t-unknown")); err == nil || !idem.IsUnrecognized(err) {
			t.Fatalf("an unknown opaque token: %v", err)
		}
	}
}

// TestRefreshOutlivesNewContext: the key set is refreshed when requests
// find it due, with no goroutine started by New, so New's context ending
// stops nothing.
func TestRefreshOutlivesNewContext(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1")
	is := newIssuer(t, rs)
	ctx, cancel := context.WithCancel(t.Context())
	a, err := jwtauth.New(ctx, is.config(clock))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	clock.Advance(jwtauth.DefaultRefreshInterval)
	if _, err := a.Authenticate(bearer(rs.sign(t, claims(clock.Now(), nil)))); err != nil {
		t.Fatalf("the key set is not refreshed after New's context ended: %v", err)
	}
	jwtauth.WaitForRefresh(a)
	if n := is.hits.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}

// TestKeyAlgorithm: a key published with an alg verifies only tokens of
// that alg, even when the token's alg is on the allow-list and fits the
// key's type.
func TestKeyAlgorithm(t *testing.T) {
	clock := fakeclock.New(start)
	rs := rsaKey(t, "rsa-1") // published with alg RS256
	is := newIssuer(t, rs)
	cfg := is.config(clock)
	cfg.Algorithms = []string{"RS256", "PS256"}
	a := newAuth(t, cfg)
	ps := rs
	ps.alg = jose.PS256
	token := ps.sign(t, claims(clock.Now(), nil))
	_, err := a.Authenticate(bearer(token))
	refused(t, token, err, `the issuer's key kid="rsa-1" does not sign with the token's alg=PS256`)
}

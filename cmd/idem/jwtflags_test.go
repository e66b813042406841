package main

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/spf13/pflag"
)

// parseJWTFlags parses args as the JWT flags, then fills them from env.
func parseJWTFlags(t *testing.T, env map[string]string, args ...string) jwtOptions {
	t.Helper()
	var o jwtOptions
	f := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.flags(f)
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	Main{Getenv: func(k string) string { return env[k] }}.jwtDefaults(&o)
	return o
}

func TestJWTFlags(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Use: "sig"}}})
	}))
	defer jwks.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()

	t.Run("env fills what the flags leave", func(t *testing.T) {
		o := parseJWTFlags(t, map[string]string{"IDEM_JWKS_URL": "https://env/jwks", "IDEM_JWT_ISSUER": "env-iss", "IDEM_JWT_AUDIENCE": "env-aud", "IDEM_JWT_CLAIMS": "org=tenant"},
			"--jwt-issuer", "flag-iss")
		if o.jwksURL != "https://env/jwks" || o.issuer != "flag-iss" || o.audience != "env-aud" || o.claims != "org=tenant" ||
			strings.Join(o.algorithms, ",") != "RS256,ES256" || o.leeway != time.Minute {
			t.Fatalf("%+v", o)
		}
	})

	t.Run("no --jwks-url, no authenticator", func(t *testing.T) {
		a, err := parseJWTFlags(t, nil).authenticator(t.Context())
		if a != nil || err != nil {
			t.Fatalf("%v, %v; want nil, nil", a, err)
		}
	})

	t.Run("valid", func(t *testing.T) {
		o := parseJWTFlags(t, nil, "--jwks-url", jwks.URL, "--jwt-issuer", "https://login.example.com/", "--jwt-audience", "idem",
			"--jwt-claims", "org=tenant,roles=groups", "--jwt-algorithms", "RS256,PS256", "--jwt-leeway", "0")
		a, err := o.authenticator(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		cfg := a.Config()
		if cfg.Leeway != 0 || cfg.Claims.Org != "tenant" || cfg.Claims.Roles != "groups" || cfg.Claims.Subject != "sub" || strings.Join(cfg.Algorithms, ",") != "RS256,PS256" {
			t.Fatalf("config %+v", cfg)
		}
	})

	for _, c := range []struct {
		name  string
		args  []string
		usage bool
		want  string
	}{
		{"issuer without URL", []string{"--jwt-issuer", "i"}, true, "--jwt-issuer is given without --jwks-url"},
		{"no issuer", []string{"--jwks-url", jwks.URL, "--jwt-audience", "a"}, true, "--jwt-issuer is required: the iss claim"},
		{"no audience", []string{"--jwks-url", jwks.URL, "--jwt-issuer", "i"}, true, "--jwt-audience is required: the aud claim"},
		{"plain http", []string{"--jwks-url", "http://login.example.com/jwks", "--jwt-issuer", "i", "--jwt-audience", "a"}, true, `--jwks-url "http://login.example.com/jwks" must be https`},
		{"bad claims", []string{"--jwks-url", jwks.URL, "--jwt-issuer", "i", "--jwt-audience", "a", "--jwt-claims", "tenant=org"}, true, `--jwt-claims: key "tenant" is not one of`},
		{"bad default kind", []string{"--jwks-url", jwks.URL, "--jwt-issuer", "i", "--jwt-audience", "a", "--jwt-claims", "default_kind=robot"}, true, `--jwt-claims default_kind "robot" is not one of agent`},
		{"HS256", []string{"--jwks-url", jwks.URL, "--jwt-issuer", "i", "--jwt-audience", "a", "--jwt-algorithms", "HS256"}, true, `--jwt-algorithms "HS256" is not one of RS256`},
		{"leeway", []string{"--jwks-url", jwks.URL, "--jwt-issuer", "i", "--jwt-audience", "a", "--jwt-leeway", "10m"}, true, "--jwt-leeway 10m0s is more than 5m0s"},
		{"negative leeway", []string{"--jwks-url", jwks.URL, "--jwt-issuer", "i", "--jwt-audience", "a", "--jwt-leeway", "-1s"}, true, "--jwt-leeway must be 0 or more"},
		{"unreachable", []string{"--jwks-url", downURL, "--jwt-issuer", "i", "--jwt-audience", "a"}, false, "--jwks-url: the key set at " + downURL + " cannot be fetched"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := parseJWTFlags(t, nil, c.args...).authenticator(t.Context())
			var u usageError
			if a != nil || err == nil || !strings.Contains(err.Error(), c.want) || errors.As(err, &u) != c.usage {
				t.Fatalf("%v, %v; want a usage error (%v) saying %q", a, err, c.usage, c.want)
			}
		})
	}
}

// TestServeLogsJWTAuth (issue 26, item 8): with --jwks-url, idem serve
// (and idem proxy, which starts the same way) says at start-up that JWTs
// are accepted: the issuer, the audience, how many keys the set gave and
// where it is; and, without --public-url, where MCP clients will and will
// not find the authorization server. A malformed --public-url is a usage
// error naming the flag.
func TestServeLogsJWTAuth(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &key.PublicKey, KeyID: "k1", Use: "sig"}, {Key: &other.PublicKey, KeyID: "k2", Use: "sig"},
		}})
	}))
	defer jwks.Close()
	args := []string{"--jwks-url", jwks.URL, "--jwt-issuer", "https://login.example.com/", "--jwt-audience", "https://idem.example.com"}

	out := serveUntilListening(t, args...)
	var line map[string]any
	for l := range strings.SplitSeq(out, "\n") {
		if strings.Contains(l, `"msg":"JWT auth on"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line["issuer"] != "https://login.example.com/" || line["audience"] != "https://idem.example.com" || line["keys"] != float64(2) || line["jwksUrl"] != jwks.URL {
		t.Fatalf("no start-up line for JWT auth, or a wrong one (%v):\n%s", line, out)
	}
	if !strings.Contains(out, "no --public-url") {
		t.Fatalf("no word on --public-url:\n%s", out)
	}
	if out := serveUntilListening(t, append(args, "--public-url", "https://idem.example.com")...); strings.Contains(out, "no --public-url") {
		t.Fatalf("a word on --public-url although it is given:\n%s", out)
	}
	if out := serveUntilListening(t, "--tokens-file", "/dev/null"); strings.Contains(out, "JWT auth on") {
		t.Fatalf("JWT auth said to be on without --jwks-url:\n%s", out)
	}
	code, _, stderr := run(t, nil, "serve", "--public-url", "https://idem.example.com/idem")
	if code != exitUsage || !strings.Contains(stderr, "--public-url") {
		t.Fatalf("a public URL with a path: exit %d, %s; want exit 2 naming --public-url", code, stderr)
	}
}

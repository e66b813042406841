package idem

import (
	"errors"
	"net/http"
	"slices"
	"strings"
)

// Authenticator decides who sent a request. Every surface asks it: the
// HTTP API and MCP over HTTP for each request, the console at sign-in. It
// sees the whole request, so a bearer token, a client certificate
// (r.TLS), a header set by a trusted gateway or an anonymous principal
// can each be expressed.
//
// Authenticate returns the caller's principal, or an error the caller is
// answered with (an *Error of CodeUnauthenticated: 401). An error marked
// with Unrecognized says "not mine" (no credential this authenticator
// knows), so that a chain (Authenticators) asks the next one.
type Authenticator interface {
	Authenticate(r *http.Request) (Principal, error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(r *http.Request) (Principal, error)

// Authenticate implements Authenticator.
func (f AuthenticatorFunc) Authenticate(r *http.Request) (Principal, error) { return f(r) }

// Authenticators asks each authenticator in turn. The first principal
// wins; an error marked Unrecognized passes the request to the next one;
// any other error ends the chain (a token that was recognized and found
// expired is not retried elsewhere). When no authenticator recognizes the
// request, the first one's error is returned.
type Authenticators []Authenticator

// Authenticate implements Authenticator.
func (as Authenticators) Authenticate(r *http.Request) (Principal, error) {
	var first error
	for _, a := range as {
		p, err := a.Authenticate(r)
		if err == nil {
			return p, nil
		}
		if !IsUnrecognized(err) {
			return Principal{}, err
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = Unrecognized(Errorf(CodeUnauthenticated, "no caller can authenticate: this server accepts no credentials"))
	}
	return Principal{}, first
}

// TokenIssuers is implemented by an Authenticator that accepts the access
// tokens of OAuth 2.0 authorization servers (jwtauth: its issuer). The
// surfaces name them to clients in their protected resource metadata (RFC
// 9728), so that a client answered 401 finds where to get a token.
type TokenIssuers interface {
	// AuthorizationServers returns the issuer identifiers (RFC 8414).
	AuthorizationServers() []string
}

// AuthorizationServers implements TokenIssuers: the issuers of every
// authenticator of the chain, each once, in order.
func (as Authenticators) AuthorizationServers() []string {
	var out []string
	for _, a := range as {
		for _, s := range AuthorizationServersOf(a) {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// AuthorizationServersOf returns the authorization servers whose tokens a
// accepts: none unless a implements TokenIssuers (the tokens file's tokens
// come from no authorization server).
func AuthorizationServersOf(a Authenticator) []string {
	if ti, ok := a.(TokenIssuers); ok {
		return ti.AuthorizationServers()
	}
	return nil
}

// Unrecognized marks an Authenticator's error as "the request carries no
// credential I know" (no token, or a token of another kind), as opposed to
// a credential it knows and refuses.
func Unrecognized(err error) error {
	if err == nil {
		return nil
	}
	return unrecognized{err}
}

// IsUnrecognized reports whether err was marked with Unrecognized.
func IsUnrecognized(err error) bool {
	var u unrecognized
	return errors.As(err, &u)
}

type unrecognized struct{ error }

func (u unrecognized) Unwrap() error { return u.error }

// BearerToken returns the token of the request's Authorization: Bearer
// header. Its errors are marked Unrecognized when the request has no such
// header, and are UNAUTHENTICATED problems that say what to send.
func BearerToken(r *http.Request) (string, error) {
	values := r.Header.Values("Authorization")
	switch {
	case len(values) > 1:
		return "", Errorf(CodeUnauthenticated, "the request has %d Authorization headers; send exactly one, Authorization: Bearer <token>", len(values))
	case len(values) == 0:
		return "", Unrecognized(Errorf(CodeUnauthenticated, "send a token as Authorization: Bearer <token>"))
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", Unrecognized(Errorf(CodeUnauthenticated, "the Authorization header is not a bearer token; send Authorization: Bearer <token>"))
	}
	return token, nil
}

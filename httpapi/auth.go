package httpapi

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/idem-run/idem"
)

// Tokens is an idem.Authenticator over a fixed set of bearer tokens (the
// tokens file, the demo tokens). It keeps only the tokens' SHA-256 hashes,
// never the tokens.
type Tokens struct {
	byHash map[[sha256.Size]byte]idem.Principal
}

// NewTokens hashes each token and returns the set.
func NewTokens(tokens map[string]idem.Principal) *Tokens {
	t := &Tokens{byHash: make(map[[sha256.Size]byte]idem.Principal, len(tokens))}
	for token, p := range tokens {
		t.byHash[sha256.Sum256([]byte(token))] = p
	}
	return t
}

// Add accepts token for p (only its hash is kept).
func (t *Tokens) Add(token string, p idem.Principal) {
	t.byHash[sha256.Sum256([]byte(token))] = p
}

// Len returns how many tokens the set accepts.
func (t *Tokens) Len() int { return len(t.byHash) }

var _ idem.Authenticator = (*Tokens)(nil)

// Authenticate implements idem.Authenticator: the request's bearer token
// must be one of the set's. An unknown token is Unrecognized, so that a
// chain may ask another authenticator (JWTs).
func (t *Tokens) Authenticate(r *http.Request) (idem.Principal, error) {
	token, err := idem.BearerToken(r)
	if err != nil {
		return idem.Principal{}, err
	}
	p, ok := t.byHash[sha256.Sum256([]byte(token))]
	if !ok {
		return idem.Principal{}, idem.Unrecognized(idem.Errorf(idem.CodeUnauthenticated, "the bearer token is not known; send a valid token as Authorization: Bearer <token>"))
	}
	return p, nil
}

// ReadTokensFile reads hashed tokens, one per line:
//
//	sha256:<hex of SHA-256(token)> <org> <principal id> <kind> [role,role…]
//
// Blank lines and lines starting with # are ignored.
func ReadTokensFile(r io.Reader) (*Tokens, error) {
	t := &Tokens{byHash: map[[sha256.Size]byte]idem.Principal{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || len(f) > 5 || !strings.HasPrefix(f[0], "sha256:") {
			return nil, fmt.Errorf("tokens file line %d: want sha256:<hex> ORG PRINCIPAL KIND [ROLES]", n)
		}
		sum, err := hex.DecodeString(strings.TrimPrefix(f[0], "sha256:"))
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("tokens file line %d: the hash is not 64 hex digits", n)
		}
		kind := idem.PrincipalKind(f[3])
		if !kind.Valid() {
			return nil, fmt.Errorf("tokens file line %d: kind %q is not one of %s", n, f[3], idem.PrincipalKindList)
		}
		p := idem.Principal{Org: f[1], ID: f[2], Kind: kind}
		if len(f) == 5 {
			p.Roles = strings.Split(f[4], ",")
		}
		t.byHash[[sha256.Size]byte(sum)] = p
	}
	return t, sc.Err()
}

package demo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/idem-run/idem"
)

// Token is an API token as lists show it: never the token itself.
type Token struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Scopes    []string  `json:"scopes"`
	CreatedBy string    `json:"createdBy"`
	CreatedAt time.Time `json:"createdAt"`
}

// MintedToken is the answer of token.mint: the token's record and, once,
// the token.
type MintedToken struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Scopes    []string  `json:"scopes"`
	CreatedBy string    `json:"createdBy"`
	CreatedAt time.Time `json:"createdAt"`
	// Secret is the bearer token (idem_…). Only its SHA-256 is stored; a
	// same-key retry within the secret window replays it.
	Secret string `json:"secret"`
}

// TokenList is the answer of token.list.
type TokenList struct {
	Tokens []Token `json:"tokens"`
	// NextCursor is the cursor of the next page, null on the last.
	NextCursor *string `json:"nextCursor" jsonschema:"nullable,description=pass as cursor for the next page; null on the last page"`
}

// ContextToken is a short-lived credential, valid from IssuedAt to
// ExpiresAt, bound to the principal that asked for it. It is not stored.
type ContextToken struct {
	Token     string    `json:"token"`
	Org       string    `json:"org"`
	Principal string    `json:"principal"`
	IssuedAt  time.Time `json:"issuedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// ContextTokenTTL is how long a context token lives.
const ContextTokenTTL = 5 * time.Minute

type tokenMintIn struct {
	Name   string   `json:"name" jsonschema:"minLength=1,maxLength=100"`
	Scopes []string `json:"scopes" jsonschema:"minItems=1,uniqueItems=true,enum=read,enum=write,enum=admin"`
}

type tokenListIn struct {
	Limit  int    `json:"limit,omitempty" in:"query" jsonschema:"minimum=1,maximum=100,default=100,description=at most this many rows (default 100)"`
	Cursor string `json:"cursor,omitempty" in:"query" jsonschema:"minLength=1,maxLength=1024,description=nextCursor of the previous page; leave it out for the first page"`
}

type contextTokenIn struct{}

func (a *App) tokenMint() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "token.mint", Method: http.MethodPost, Path: "/v1/tokens",
		Summary:    "Mint an API token; returns the token once",
		SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{
			Transactional: true,
			Kind:          idem.RetrySameKeyReplay,
			Enforcement:   idem.EnforceTransactionalSecretReplay,
			Reconcile:     "token.list",
			Rationale: "A mint returns its secret only once: a same-key retry within the 15-minute window recovers the exact token from the encrypted result " +
				"instead of minting another; after it, list tokens to find the one created and rotate under a new key if a new secret is needed.",
		},
		SuccessStatus: http.StatusCreated,
	}, func(ctx context.Context, call *idem.Call, in tokenMintIn) (MintedToken, error) {
		t := MintedToken{
			ID: platformID("tok_"), Name: in.Name, Scopes: in.Scopes,
			CreatedBy: call.Principal.ID, CreatedAt: a.now(), Secret: platformSecret("idem_"),
		}
		scopes, _ := json.Marshal(t.Scopes)
		sum := sha256.Sum256([]byte(t.Secret))
		err := a.db.InCall(ctx, call, func(tx *Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO idem_demo_tokens (org, id, name, scopes, secret_sha256, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
				call.Principal.Org, t.ID, t.Name, string(scopes), hex.EncodeToString(sum[:]), t.CreatedBy, micros(t.CreatedAt))
			return err
		})
		if err != nil {
			return MintedToken{}, err
		}
		return t, nil
	})
}

func (a *App) tokenList() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "token.list", Method: http.MethodGet, Path: "/v1/tokens",
		Summary:    "List the org's API tokens oldest first, one page at a time (never the tokens themselves)",
		SideEffect: idem.SideEffectRead,
		Retry:      idem.RetryContract{Rationale: freshReadRationale},
	}, func(ctx context.Context, call *idem.Call, in tokenListIn) (TokenList, error) {
		var out TokenList
		err := a.db.InTx(ctx, func(tx *Tx) error {
			var err error
			out.Tokens, out.NextCursor, err = readPage(ctx, tx, byCreated, in.Limit, in.Cursor,
				`SELECT id, name, scopes, created_by, created_at FROM idem_demo_tokens WHERE org = ?`, []any{call.Principal.Org},
				func(rows rowScanner) (Token, []any, error) {
					var t Token
					var scopes string
					var at int64
					if err := rows.Scan(&t.ID, &t.Name, &scopes, &t.CreatedBy, &at); err != nil {
						return t, nil, err
					}
					if err := json.Unmarshal([]byte(scopes), &t.Scopes); err != nil {
						return t, nil, fmt.Errorf("token %s: scopes: %w", t.ID, err)
					}
					t.CreatedAt = fromMicros(at)
					return t, []any{at, t.ID}, nil
				})
			return err
		})
		return out, err
	})
}

func (a *App) authContextToken() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "auth.context_token", Method: http.MethodPost, Path: "/v1/auth/context-token",
		Summary:    "Issue a short-lived context token for the caller (valid 5 minutes, not stored)",
		SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{
			Kind:              idem.RetryNoAutomaticRetry,
			ResponseSemantics: idem.SemanticsPointInTime,
			Rationale: "A short-lived, point-in-time credential: a replay could hand back a token that has expired or reflects a stale authorization snapshot, " +
				"so after an ambiguous answer request a new one instead of retrying with a key.",
		},
	}, func(ctx context.Context, call *idem.Call, _ contextTokenIn) (ContextToken, error) {
		now := a.now()
		return ContextToken{
			Token: platformSecret("ctx_"), Org: call.Principal.Org, Principal: call.Principal.ID,
			IssuedAt: now, ExpiresAt: now.Add(ContextTokenTTL),
		}, nil
	})
}

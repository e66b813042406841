package demo

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"

	"github.com/idem-run/idem"
)

// platformOperations: businesses, backends, webhooks, tokens, auth
// (SPEC §12). Each family lives in a file of its own.
func (a *App) platformOperations() []idem.Operation {
	return []idem.Operation{
		a.businessCreate(), a.businessShow(), a.businessList(),
		a.backendBind(), a.backendList(),
		a.webhookCreate(), a.webhookList(), a.webhookTrigger(), a.webhookDeliveries(),
		a.tokenMint(), a.tokenList(), a.authContextToken(),
	}
}

// seedPlatform: the platform has no fixtures; every business, webhook and
// token is made by its operation.
func (a *App) seedPlatform(ctx context.Context, org string) error { return nil }

// Declared errors shared by the platform operations.
var (
	errBusinessNotFound = idem.Declare(idem.CodeNotFound, "No business with this slug in the caller's org.")
	errWebhookNotFound  = idem.Declare(idem.CodeNotFound, "No business with this slug, or no webhook with this id under it, in the caller's org.")
)

// freshReadRationale is the rationale of every platform read.
const freshReadRationale = "A read of current state: it always executes and is never cached, so repeating it is always safe and always current."

// platformID returns prefix + 16 random lower-case base32 characters
// (80 bits), e.g. wh_k3j5x2mq7a9d4e1f.
func platformID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return prefix + lowerBase32.EncodeToString(b[:])
}

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// platformSecret returns prefix + the unpadded base64url of 32 random
// bytes: 256 bits, URL- and header-safe.
func platformSecret(prefix string) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

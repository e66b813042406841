package demo

import (
	"context"

	"idem"
)

// platformOperations: businesses, backends, webhooks, tokens, auth.
func (a *App) platformOperations() []idem.Operation { return nil }

func (a *App) seedPlatform(ctx context.Context, org string) error { return nil }

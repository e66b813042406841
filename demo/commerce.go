package demo

import (
	"context"
	"net/http"

	"idem"
)

// commerceOperations: orders, refunds, limits, service accounts, agreements.
func (a *App) commerceOperations() []idem.Operation { return nil }

func (a *App) seedCommerce(ctx context.Context, org string) error { return nil }

func (a *App) commerceRoutes() map[string]func(w http.ResponseWriter, r *http.Request, p idem.Principal) {
	return nil
}

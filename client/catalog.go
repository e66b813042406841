package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/suggest"
)

// Catalog is the operations catalog (GET /v1/operations, SPEC §4).
type Catalog struct {
	// Raw is the document exactly as the server sent it.
	Raw                 []byte               `json:"-"`
	Operations          []Operation          `json:"operations"`
	DirectCLIOperations []DirectCLIOperation `json:"directCliOperations"`
}

// Operation is one catalog entry, with what the client derives from it.
type Operation struct {
	idem.CatalogOperation
}

// DirectCLIOperation is a CLI command listed in the catalog with its retry
// contract, though it is not an operation.
type DirectCLIOperation = idem.DirectCLIOperation

// Operation returns the named operation.
func (c *Catalog) Operation(name string) (Operation, bool) {
	for _, op := range c.Operations {
		if op.Name == name {
			return op, true
		}
	}
	return Operation{}, false
}

// didYouMean is "; did you mean NAME?" when an operation's name is a
// likely slip for name, else "".
func (c *Catalog) didYouMean(name string) string {
	names := make([]string, len(c.Operations))
	for i, op := range c.Operations {
		names[i] = op.Name
	}
	if near := suggest.Closest(name, names); near != "" {
		return fmt.Sprintf("; did you mean %s?", near)
	}
	return ""
}

// Locations maps the operation's path and query arguments to "path" or
// "query" (the inputSchema's x-idem-in annotations).
func (o Operation) Locations() map[string]string { return idem.LocationsFromSchema(o.InputSchema) }

// Bound is the longest one execution of the operation may run on the
// server: its timeout per attempt times its attempts, plus the runtime
// backoff between them.
func (o Operation) Bound() time.Duration {
	return idem.ExecutionBound(time.Duration(o.TimeoutMs)*time.Millisecond, o.RuntimeRetry.MaxAttempts, o.RuntimeRetry.BackoffMs)
}

// PropertyTypes returns the JSON Schema "type" of each top-level input
// property (a property with several types or none is left out).
func (o Operation) PropertyTypes() map[string]string {
	var s struct {
		Properties map[string]struct {
			Type json.RawMessage `json:"type"`
		} `json:"properties"`
	}
	out := map[string]string{}
	if json.Unmarshal(o.InputSchema, &s) != nil {
		return out
	}
	for name, p := range s.Properties {
		var t string
		if json.Unmarshal(p.Type, &t) == nil {
			out[name] = t
		}
	}
	return out
}

// Properties returns the names of the operation's top-level input
// properties.
func (o Operation) Properties() []string {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(o.InputSchema, &s)
	out := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		out = append(out, name)
	}
	return out
}

// catalogTimeout bounds one catalog or system-route request.
const catalogTimeout = 30 * time.Second

// Catalog returns the server's operations catalog, fetched once per client
// (a failed fetch is not cached; RefreshCatalog fetches it again). The
// catalog is public: no token is sent. Fetching it is a fresh read,
// retried on network errors and 5xx.
func (c *Client) Catalog(ctx context.Context) (*Catalog, error) {
	c.mu.Lock()
	cached := c.catalog
	c.mu.Unlock()
	if cached != nil {
		return cached, nil
	}
	cat, err := c.fetchCatalog(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.catalog == nil {
		c.catalog = cat
	}
	cached = c.catalog
	c.mu.Unlock()
	return cached, nil
}

// RefreshCatalog fetches the catalog again, as Catalog does, and makes it
// the one later calls use; on error the client keeps the one it had.
func (c *Client) RefreshCatalog(ctx context.Context) (*Catalog, error) {
	cat, err := c.fetchCatalog(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.catalog = cat
	c.mu.Unlock()
	return cat, nil
}

// fetchCatalog reads GET /v1/operations.
func (c *Client) fetchCatalog(ctx context.Context) (*Catalog, error) {
	res, err := c.get(ctx, request{method: "GET", path: "/v1/operations"})
	if err != nil {
		return nil, err
	}
	cat := &Catalog{}
	if err := json.Unmarshal(res.Body, cat); err != nil {
		return nil, fmt.Errorf("client: the catalog at %s/v1/operations is not a catalog document: %w", c.base.Redacted(), err)
	}
	cat.Raw = res.Body
	return cat, nil
}

package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/idem-run/idem"
)

// Answer is the answer of a system route: the decoded data, and the
// Result it came from (Body holds the exact bytes).
type Answer[T any] struct {
	Data T
	*Result
}

// Approvals lists the approvals the caller may see (its own; every one of
// its org for an approver), optionally only those in status
// (pending, approved, rejected, consumed, expired).
func (c *Client) Approvals(ctx context.Context, status string) (*Answer[[]idem.Approval], error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	return getData[[]idem.Approval](ctx, c, request{method: "GET", path: "/v1/approvals", query: q, auth: true})
}

// Approval returns one approval.
func (c *Client) Approval(ctx context.Context, id string) (*Answer[idem.Approval], error) {
	return getData[idem.Approval](ctx, c, request{method: "GET", path: "/v1/approvals/" + url.PathEscape(id), auth: true})
}

// Approve approves an approval, with an optional reason. Repeating the
// decision returns the approval unchanged; Approve is not retried
// automatically.
func (c *Client) Approve(ctx context.Context, id, reason string) (*Answer[idem.Approval], error) {
	return c.decide(ctx, id, "approve", reason)
}

// Reject rejects an approval, with an optional reason.
func (c *Client) Reject(ctx context.Context, id, reason string) (*Answer[idem.Approval], error) {
	return c.decide(ctx, id, "reject", reason)
}

func (c *Client) decide(ctx context.Context, id, decision, reason string) (*Answer[idem.Approval], error) {
	r := request{method: "POST", path: "/v1/approvals/" + url.PathEscape(id) + "/" + decision, auth: true, once: true}
	if reason != "" {
		r.body, _ = json.Marshal(map[string]string{"reason": reason})
	}
	res, err := c.do(ctx, r, retryNever, c.systemBounds(), "", "", "")
	if err != nil {
		return nil, err
	}
	return decodeAnswer[idem.Approval](res)
}

// Execution returns an execution with its audit events.
func (c *Client) Execution(ctx context.Context, id string) (*Answer[idem.Execution], error) {
	return getData[idem.Execution](ctx, c, request{method: "GET", path: "/v1/executions/" + url.PathEscape(id), auth: true})
}

// Attempt returns the caller's attempt record for key. The key travels
// percent-encoded, "/" as %2F.
func (c *Client) Attempt(ctx context.Context, key string) (*Answer[idem.AttemptView], error) {
	return getData[idem.AttemptView](ctx, c, request{method: "GET", path: "/v1/attempts/" + url.PathEscape(key), auth: true})
}

func getData[T any](ctx context.Context, c *Client, r request) (*Answer[T], error) {
	res, err := c.get(ctx, r)
	if err != nil {
		return nil, err
	}
	return decodeAnswer[T](res)
}

func decodeAnswer[T any](res *Result) (*Answer[T], error) {
	a := &Answer[T]{Result: res}
	if err := res.Decode(&a.Data); err != nil {
		return nil, fmt.Errorf("client: decode the answer: %w", err)
	}
	return a, nil
}

package demo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/sendonce"
	"github.com/idem-run/idem/webhooksig"
)

// Webhook is a business's webhook endpoint as lists show it: never its
// signing secret.
type Webhook struct {
	ID        string    `json:"id"`
	Business  string    `json:"business"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	CreatedBy string    `json:"createdBy"`
	CreatedAt time.Time `json:"createdAt"`
}

// CreatedWebhook is the answer of webhook.create: the webhook and, once,
// its signing secret.
type CreatedWebhook struct {
	ID        string    `json:"id"`
	Business  string    `json:"business"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	CreatedBy string    `json:"createdBy"`
	CreatedAt time.Time `json:"createdAt"`
	// Secret signs every delivery (see docs/webhooks.md). It is shown
	// here only; a same-key retry within the secret window replays it.
	Secret string `json:"secret"`
}

// WebhookList is the answer of webhook.list.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
	// NextCursor is the cursor of the next page, null on the last.
	NextCursor *string `json:"nextCursor" jsonschema:"nullable,description=pass as cursor for the next page; null on the last page"`
}

// Delivery is one attempted delivery of an event to a webhook.
type Delivery struct {
	// ID is also the body's "id" and the Idem-Delivery-Id header.
	ID        string `json:"id"`
	WebhookID string `json:"webhookId"`
	Type      string `json:"type"`
	URL       string `json:"url"`
	// Outcome is sending (the request went out, or was about to, and no
	// outcome was recorded), delivered (a 2xx answer) or failed (another
	// answer, or none).
	Outcome   string `json:"outcome" jsonschema:"enum=sending,enum=delivered,enum=failed"`
	Delivered bool   `json:"delivered"`
	// ResponseStatus is the receiver's HTTP status; absent without an answer.
	ResponseStatus int `json:"responseStatus,omitempty"`
	// Error says why no answer came (timeout, refused connection); absent
	// when the receiver answered.
	Error       string    `json:"error,omitempty"`
	AttemptedAt time.Time `json:"attemptedAt"`
	DurationMs  int64     `json:"durationMs"`
	ExecutionID string    `json:"executionId"`
}

// DeliveryList is the answer of webhook.deliveries.
type DeliveryList struct {
	Deliveries []Delivery `json:"deliveries"`
	// NextCursor is the cursor of the next page, null on the last.
	NextCursor *string `json:"nextCursor" jsonschema:"nullable,description=pass as cursor for the next page; null on the last page"`
}

// Delivery outcomes.
const (
	outcomeSending   = "sending"
	outcomeDelivered = "delivered"
	outcomeFailed    = "failed"
)

// EventBody is the JSON body of a delivery.
type EventBody struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"createdAt"`
	Data      EventData `json:"data"`
}

// EventData is what a triggered (test) event carries.
type EventData struct {
	Business  string `json:"business"`
	WebhookID string `json:"webhookId"`
	// Test is true: webhook.trigger sends sample events.
	Test bool `json:"test"`
}

type webhookCreateIn struct {
	Slug   string   `json:"slug" in:"path" jsonschema:"minLength=1,maxLength=63"`
	URL    string   `json:"url" jsonschema:"format=uri,pattern=^https?://,maxLength=2048,description=absolute http or https URL that receives the deliveries"`
	Events []string `json:"events" jsonschema:"minItems=1,uniqueItems=true,enum=payment.succeeded,enum=payment.failed,enum=refund.created,enum=business.updated"`
}

type webhookListIn struct {
	Slug   string `json:"slug" in:"path" jsonschema:"minLength=1,maxLength=63"`
	Limit  int    `json:"limit,omitempty" in:"query" jsonschema:"minimum=1,maximum=100,default=100,description=at most this many rows (default 100)"`
	Cursor string `json:"cursor,omitempty" in:"query" jsonschema:"minLength=1,maxLength=1024,description=nextCursor of the previous page; leave it out for the first page"`
}

type deliveryListIn struct {
	Slug   string `json:"slug" in:"path" jsonschema:"minLength=1,maxLength=63"`
	ID     string `json:"id" in:"path" jsonschema:"minLength=1,maxLength=64"`
	Limit  int    `json:"limit,omitempty" in:"query" jsonschema:"minimum=1,maximum=100,default=100,description=at most this many rows (default 100)"`
	Cursor string `json:"cursor,omitempty" in:"query" jsonschema:"minLength=1,maxLength=1024,description=nextCursor of the previous page; leave it out for the first page"`
}

type webhookTriggerIn struct {
	Slug string `json:"slug" in:"path" jsonschema:"minLength=1,maxLength=63"`
	ID   string `json:"id" in:"path" jsonschema:"minLength=1,maxLength=64"`
	Type string `json:"type" jsonschema:"enum=payment.succeeded,enum=payment.failed,enum=refund.created,enum=business.updated"`
}

func (a *App) webhookCreate() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "webhook.create", Method: http.MethodPost, Path: "/v1/businesses/{slug}/webhooks",
		Summary:    "Create a webhook endpoint for a business; returns its signing secret once",
		SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{
			Transactional: true,
			Kind:          idem.RetrySameKeyReplay,
			Enforcement:   idem.EnforceTransactionalSecretReplay,
			Reconcile:     "webhook.list",
			Rationale: "Creating a webhook mints a signing secret that is shown only once: a same-key retry within the secret window recovers the exact secret " +
				"from the encrypted result instead of creating a second webhook; after the window, list webhooks to find it.",
		},
		Errors:        []idem.DeclaredError{errBusinessNotFound},
		SuccessStatus: http.StatusCreated,
	}, func(ctx context.Context, call *idem.Call, in webhookCreateIn) (CreatedWebhook, error) {
		org := call.Principal.Org
		w := CreatedWebhook{
			ID: platformID("wh_"), Business: in.Slug, URL: in.URL, Events: in.Events,
			CreatedBy: call.Principal.ID, CreatedAt: a.now(), Secret: platformSecret("whsec_"),
		}
		sealed, keyID, err := a.sealer.Seal([]byte(w.Secret), webhookSecretAAD(org, w.ID))
		if err != nil {
			return CreatedWebhook{}, fmt.Errorf("seal webhook secret: %w", err)
		}
		events, _ := json.Marshal(w.Events)
		err = a.db.InCall(ctx, call, func(tx *Tx) error {
			if _, err := getBusiness(ctx, tx, org, in.Slug); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO idem_demo_webhooks (org, id, business, url, events, secret_sealed, secret_key_id, created_by, created_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				org, w.ID, w.Business, w.URL, string(events), base64.StdEncoding.EncodeToString(sealed), keyID, w.CreatedBy, micros(w.CreatedAt))
			return err
		})
		if err != nil {
			return CreatedWebhook{}, err
		}
		return w, nil
	})
}

func (a *App) webhookList() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "webhook.list", Method: http.MethodGet, Path: "/v1/businesses/{slug}/webhooks",
		Summary:    "List a business's webhooks oldest first, one page at a time (never their secrets)",
		SideEffect: idem.SideEffectRead,
		Retry:      idem.RetryContract{Rationale: freshReadRationale},
		Errors:     []idem.DeclaredError{errBusinessNotFound},
	}, func(ctx context.Context, call *idem.Call, in webhookListIn) (WebhookList, error) {
		org := call.Principal.Org
		var out WebhookList
		err := a.db.InTx(ctx, func(tx *Tx) error {
			if _, err := getBusiness(ctx, tx, org, in.Slug); err != nil {
				return err
			}
			var err error
			out.Webhooks, out.NextCursor, err = readPage(ctx, tx, byCreated, in.Limit, in.Cursor,
				`SELECT id, url, events, created_by, created_at FROM idem_demo_webhooks WHERE org = ? AND business = ?`, []any{org, in.Slug},
				func(rows rowScanner) (Webhook, []any, error) {
					w := Webhook{Business: in.Slug}
					var events string
					var at int64
					if err := rows.Scan(&w.ID, &w.URL, &events, &w.CreatedBy, &at); err != nil {
						return w, nil, err
					}
					if err := json.Unmarshal([]byte(events), &w.Events); err != nil {
						return w, nil, fmt.Errorf("webhook %s: events: %w", w.ID, err)
					}
					w.CreatedAt = fromMicros(at)
					return w, []any{at, w.ID}, nil
				})
			return err
		})
		return out, err
	})
}

func (a *App) webhookTrigger() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "webhook.trigger", Method: http.MethodPost, Path: "/v1/businesses/{slug}/webhooks/{id}/trigger",
		Summary:    "Send a signed sample event to a webhook and record the delivery",
		SideEffect: idem.SideEffectExternal,
		Timeout:    15 * time.Second,
		Retry: idem.RetryContract{
			Kind:      idem.RetrySameKeyReplay,
			Reconcile: "webhook.deliveries",
			Rationale: "Each call sends a real signed HTTP request to the receiver, an effect outside this server: a key persisted before the first send " +
				"lets an uncertain retry replay the recorded delivery instead of delivering the event twice. Reconcile with webhook.deliveries.",
		},
		Errors: []idem.DeclaredError{errWebhookNotFound},
	}, a.triggerWebhook)
}

// triggerWebhook sends one event. The delivery id is derived from the
// handler's idempotency key, so every attempt of one execution sends the
// same id (a receiver deduplicates on it) and the row is written before the
// request leaves: a crash after sending leaves a 'sending' row for
// webhook.deliveries to show. A receiver's non-2xx answer, or none, is a
// recorded outcome (200, delivered: false), not an error: the effect this
// operation promises is the attempt. A store failure before the send is
// returned NotDispatched (DB.notCommitted): nothing was sent, and the key
// is freed.
func (a *App) triggerWebhook(ctx context.Context, call *idem.Call, in webhookTriggerIn) (Delivery, error) {
	org := call.Principal.Org
	now := a.now()
	d := Delivery{
		ID: deliveryID(org, call.IdempotencyKey), WebhookID: in.ID, Type: in.Type,
		Outcome: outcomeSending, AttemptedAt: now, ExecutionID: call.ExecutionID,
	}
	var sealed, keyID string
	var done bool
	err := a.db.InTx(ctx, func(tx *Tx) error {
		err := tx.QueryRow(ctx, `SELECT url, secret_sealed, secret_key_id FROM idem_demo_webhooks WHERE org = ? AND business = ? AND id = ?`,
			org, in.Slug, in.ID).Scan(&d.URL, &sealed, &keyID)
		if errors.Is(err, sql.ErrNoRows) {
			if _, err := getBusiness(ctx, tx, org, in.Slug); err != nil {
				return err
			}
			return notFound("webhook", in.ID)
		}
		if err != nil {
			return err
		}
		// An earlier attempt of this execution already delivered: answer
		// its record rather than send again.
		prev, err := getDelivery(ctx, tx, org, d.ID)
		if prev != nil && prev.Outcome == outcomeDelivered {
			d, done = *prev, true
		}
		return err
	})
	if err != nil || done {
		return d, a.db.notCommitted(ctx, err)
	}
	// Open the secret before recording an attempt: a webhook whose sealing
	// key is gone fails here (500), with nothing sent or recorded.
	secret, err := a.openWebhookSecret(org, in.ID, sealed, keyID)
	if err != nil {
		return Delivery{}, err
	}
	err = a.db.InTx(ctx, func(tx *Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO idem_demo_webhook_deliveries (org, id, webhook, type, url, outcome, attempted_at, duration_ms, execution_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)
			ON CONFLICT (org, id) DO UPDATE SET outcome = excluded.outcome, response_status = NULL, error = NULL,
				attempted_at = excluded.attempted_at, duration_ms = 0, execution_id = excluded.execution_id`,
			org, d.ID, d.WebhookID, d.Type, d.URL, d.Outcome, micros(d.AttemptedAt), d.ExecutionID)
		return err
	})
	if err != nil {
		return Delivery{}, a.db.notCommitted(ctx, err)
	}

	body, err := json.Marshal(EventBody{
		ID: d.ID, Type: d.Type, CreatedAt: now,
		Data: EventData{Business: in.Slug, WebhookID: in.ID, Test: true},
	})
	if err != nil {
		return Delivery{}, err
	}
	status, sendErr := a.sendDelivery(ctx, d, secret, body)
	d.DurationMs = a.clock.Now().Sub(now).Milliseconds()
	switch {
	case sendErr != nil:
		d.Outcome, d.Error = outcomeFailed, clipText(sendErr.Error(), 500)
	case status >= 200 && status < 300:
		d.Outcome, d.Delivered, d.ResponseStatus = outcomeDelivered, true, status
	default:
		d.Outcome, d.ResponseStatus = outcomeFailed, status
	}
	// Record the outcome even if the execution was cancelled meanwhile, so
	// that webhook.deliveries shows what is known.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = a.db.InTx(rctx, func(tx *Tx) error {
		var status, errText any
		if d.ResponseStatus != 0 {
			status = d.ResponseStatus
		}
		if d.Error != "" {
			errText = d.Error
		}
		_, err := tx.Exec(rctx, `UPDATE idem_demo_webhook_deliveries SET outcome = ?, response_status = ?, error = ?, duration_ms = ?
			WHERE org = ? AND id = ?`, d.Outcome, status, errText, d.DurationMs, org, d.ID)
		return err
	})
	if ctxErr := ctx.Err(); ctxErr != nil {
		return Delivery{}, ctxErr // cancelled or timed out: the runner answers for it
	}
	if err != nil {
		return Delivery{}, err
	}
	return d, nil
}

// openWebhookSecret opens a signing secret sealed by webhook.create.
func (a *App) openWebhookSecret(org, id, sealed, keyID string) (string, error) {
	ciphertext, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return "", fmt.Errorf("webhook %s: sealed secret: %w", id, err)
	}
	plain, err := a.sealer.Open(ciphertext, webhookSecretAAD(org, id), keyID)
	if err != nil {
		return "", fmt.Errorf("webhook %s: open signing secret: %w", id, err)
	}
	return string(plain), nil
}

// sendDelivery POSTs body to the webhook, signed, and returns the HTTP
// status of the answer. Redirects are not followed: a 3xx is an answer.
func (a *App) sendDelivery(ctx context.Context, d Delivery, secret string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "idem-webhooks/1")
	req.Header.Set(webhooksig.HeaderSignature, webhooksig.Sign(secret, a.clock.Now(), body))
	req.Header.Set(webhooksig.HeaderDeliveryID, d.ID)
	req.Header.Set(webhooksig.HeaderEventType, d.Type)
	// One delivery, one send: HTTP/2 would re-send the rewindable body by
	// itself after a reset stream or a GOAWAY (issue 33 item 1).
	sendonce.Hold(req)
	client := *a.http
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}

func (a *App) webhookDeliveries() idem.Operation {
	return idem.Define(idem.Metadata{
		Name: "webhook.deliveries", Method: http.MethodGet, Path: "/v1/businesses/{slug}/webhooks/{id}/deliveries",
		Summary:    "List the deliveries attempted to a webhook oldest first, one page at a time",
		SideEffect: idem.SideEffectRead,
		Retry:      idem.RetryContract{Rationale: freshReadRationale},
		Errors:     []idem.DeclaredError{errWebhookNotFound},
	}, func(ctx context.Context, call *idem.Call, in deliveryListIn) (DeliveryList, error) {
		org := call.Principal.Org
		var out DeliveryList
		err := a.db.InTx(ctx, func(tx *Tx) error {
			if _, err := getBusiness(ctx, tx, org, in.Slug); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM idem_demo_webhooks WHERE org = ? AND business = ? AND id = ?`, org, in.Slug, in.ID).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return notFound("webhook", in.ID)
			}
			var err error
			out.Deliveries, out.NextCursor, err = readPage(ctx, tx, byAttempt, in.Limit, in.Cursor,
				`SELECT `+deliveryColumns+` FROM idem_demo_webhook_deliveries WHERE org = ? AND webhook = ?`, []any{org, in.ID},
				func(rows rowScanner) (Delivery, []any, error) {
					d, err := scanDelivery(rows)
					return d, []any{micros(d.AttemptedAt), d.ID}, err
				})
			return err
		})
		return out, err
	})
}

const deliveryColumns = `id, webhook, type, url, outcome, response_status, error, attempted_at, duration_ms, execution_id`

func scanDelivery(row rowScanner) (Delivery, error) {
	var d Delivery
	var status sql.NullInt64
	var errText sql.NullString
	var at int64
	if err := row.Scan(&d.ID, &d.WebhookID, &d.Type, &d.URL, &d.Outcome, &status, &errText, &at, &d.DurationMs, &d.ExecutionID); err != nil {
		return Delivery{}, err
	}
	d.ResponseStatus, d.Error = int(status.Int64), errText.String
	d.Delivered = d.Outcome == outcomeDelivered
	d.AttemptedAt = fromMicros(at)
	return d, nil
}

// getDelivery reads one delivery; nil, nil when there is none.
func getDelivery(ctx context.Context, tx *Tx, org, id string) (*Delivery, error) {
	d, err := scanDelivery(tx.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM idem_demo_webhook_deliveries WHERE org = ? AND id = ?`, org, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// deliveryID derives a delivery's id from the handler's idempotency key:
// the same in every attempt of one execution, different across executions.
func deliveryID(org, handlerKey string) string {
	sum := sha256.Sum256([]byte("idem-demo/webhook-delivery\x00" + org + "\x00" + handlerKey))
	return "dlv_" + hex.EncodeToString(sum[:12])
}

// webhookSecretAAD binds a sealed signing secret to its webhook, so a
// ciphertext copied to another row (or mistaken for a one-time result
// sealed by the runner) does not open.
func webhookSecretAAD(org, id string) []byte {
	return []byte("idem-demo/webhook-secret\x00" + org + "\x00" + id)
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

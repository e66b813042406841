package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-run/idem/webhooksig"
)

// maxDeliveryBody bounds what the receiver reads of one delivery.
const maxDeliveryBody = 1 << 20

func (m Main) webhookCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Work with webhook deliveries",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(m.webhookListenCommand())
	return cmd
}

// webhookListenOptions are the flags of idem webhook listen.
type webhookListenOptions struct {
	addr      string
	secret    string
	tolerance time.Duration
}

func (m Main) webhookListenCommand() *cobra.Command {
	var o webhookListenOptions
	cmd := &cobra.Command{
		Use:   "listen",
		Short: "Run a local webhook receiver that verifies signatures and prints deliveries",
		Long: "Receive webhook deliveries on --addr, verify each Idem-Signature with the webhook's signing secret\n" +
			"(the secret webhook.create returned), print each delivery as one JSON line on stdout\n" +
			`({"id","type","verified","receivedAt","body"}) and answer 200 when it verifies, 400 when not.` + "\n" +
			"Stop it with Ctrl-C. Retry contract: no_automatic_retry (a process-owning session, not one server\n" +
			"mutation); after a failure start it again.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.secret == "" {
				o.secret = m.Getenv("IDEM_WEBHOOK_SECRET")
			}
			if o.secret == "" {
				return usagef("webhook listen needs the signing secret: --secret whsec_… (or IDEM_WEBHOOK_SECRET)")
			}
			if o.tolerance <= 0 {
				return usagef("--tolerance must be positive, got %s", o.tolerance)
			}
			return m.webhookListen(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:8787", "address to listen on")
	f.StringVar(&o.secret, "secret", "", "the webhook's signing secret, whsec_… (env IDEM_WEBHOOK_SECRET)")
	f.DurationVar(&o.tolerance, "tolerance", webhooksig.DefaultTolerance, "how far a delivery's signature timestamp may be from now")
	return cmd
}

// webhookLine is the line printed for each delivery.
type webhookLine struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Verified   bool            `json:"verified"`
	ReceivedAt time.Time       `json:"receivedAt"`
	Body       json.RawMessage `json:"body"`
	// Error says why a delivery did not verify.
	Error string `json:"error,omitempty"`
}

// webhookListen serves the receiver until ctx ends.
func (m Main) webhookListen(ctx context.Context, o webhookListenOptions) error {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.addr, err)
	}
	var mu sync.Mutex // one line at a time on stdout
	emit := func(d webhookLine) error {
		line, err := json.Marshal(d)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		_, err = m.Stdout.Write(append(line, '\n'))
		return err
	}
	srv := &http.Server{
		Handler:           webhookReceiver(o, time.Now, emit),
		ReadHeaderTimeout: 10 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(m.Stderr, "listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return fmt.Errorf("webhook listen: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("webhook listen: shutdown: %w", err)
	}
	return nil
}

// webhookReceiver verifies and reports each POSTed delivery, on any path.
func webhookReceiver(o webhookListenOptions, now func() time.Time, emit func(webhookLine) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "webhook deliveries are POSTed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxDeliveryBody+1))
		if err != nil {
			http.Error(w, "reading the body failed", http.StatusBadRequest)
			return
		}
		if len(body) > maxDeliveryBody {
			http.Error(w, "delivery larger than 1 MiB", http.StatusRequestEntityTooLarge)
			return
		}
		at := now()
		d := webhookLine{
			ID: r.Header.Get(webhooksig.HeaderDeliveryID), Type: r.Header.Get(webhooksig.HeaderEventType),
			ReceivedAt: at.UTC(), Body: body,
		}
		var fields struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}
		if json.Valid(body) {
			_ = json.Unmarshal(body, &fields)
		} else {
			d.Body, _ = json.Marshal(string(body)) // printed as a string
		}
		if d.ID == "" {
			d.ID = fields.ID
		}
		if d.Type == "" {
			d.Type = fields.Type
		}
		verr := webhooksig.Verify(o.secret, r.Header.Get(webhooksig.HeaderSignature), body, at, o.tolerance)
		d.Verified = verr == nil
		if verr != nil {
			d.Error = verr.Error()
		}
		if err := emit(d); err != nil {
			http.Error(w, "the receiver could not record the delivery", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if verr != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"received": false, "error": verr.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"received": true, "id": d.ID})
	})
}

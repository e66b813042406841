package demo

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/idem-run/idem"
)

// The ceiling route answers POST /v1/demo/ceiling like business.create
// answers a first keyed call -- same authentication, same request body, an
// envelope of the same shape and size, 201 -- but does no idempotency work
// and touches no store. The benchmark harness (bench/) measures it as the
// most the server can do, so that the cost of the idempotency layer shows as
// the gap between the two.

// ceilingEnvelope mirrors the envelope of a keyed business.create answer.
type ceilingEnvelope struct {
	Data Business    `json:"data"`
	Meta ceilingMeta `json:"meta"`
}

type ceilingMeta struct {
	Operation   string             `json:"operation"`
	ExecutionID string             `json:"executionId"`
	Attempts    int                `json:"attempts"`
	Idempotency ceilingIdempotency `json:"idempotency"`
}

type ceilingIdempotency struct {
	Key      string `json:"key"`
	Replayed bool   `json:"replayed"`
}

// withCeilingRoute adds the ceiling route to routes and returns them.
func (a *App) withCeilingRoute(routes map[string]func(w http.ResponseWriter, r *http.Request, p idem.Principal)) map[string]func(w http.ResponseWriter, r *http.Request, p idem.Principal) {
	routes["POST /v1/demo/ceiling"] = a.serveCeiling
	return routes
}

// serveCeiling decodes a business.create body and answers the envelope a
// first execution would, without reserving, executing or storing anything.
func (a *App) serveCeiling(w http.ResponseWriter, r *http.Request, p idem.Principal) {
	var in businessCreateIn
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil {
		http.Error(w, `{"code":"INVALID_INPUT"}`, http.StatusBadRequest)
		return
	}
	env := ceilingEnvelope{
		Data: Business{Slug: in.Slug, Name: in.Name, CreatedBy: p.ID, CreatedAt: a.clock.Now().UTC().Truncate(time.Microsecond)},
		Meta: ceilingMeta{
			Operation: "demo.ceiling", ExecutionID: commerceID("exe_ceiling_"), Attempts: 1,
			Idempotency: ceilingIdempotency{Key: r.Header.Get(idem.HeaderIdempotencyKey)},
		},
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(env)
}

package idem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Envelope is the success body of every operation (SPEC §9). Data never
// carries idempotency fields; they live in Meta.
type Envelope struct {
	Data json.RawMessage `json:"data"`
	Meta *Meta           `json:"meta,omitempty"`
}

// Meta describes how an answer was produced.
type Meta struct {
	Operation   string `json:"operation,omitempty"`
	ExecutionID string `json:"executionId,omitempty"`
	Attempts    int    `json:"attempts,omitempty"`
	DryRun      bool   `json:"dryRun,omitempty"`
	// Idempotency is present on every answer to a call that carried a
	// valid key.
	Idempotency *IdempotencyMeta `json:"idempotency,omitempty"`
}

// IdempotencyMeta tells a keyed caller whether the answer is a replay.
type IdempotencyMeta struct {
	Key      string `json:"key"`
	Replayed bool   `json:"replayed"`
}

// Problem is the error body of every surface: RFC 9457 with extension
// members (SPEC §9).
type Problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail"`
	Code      Code           `json:"code"`
	Retryable bool           `json:"retryable"`
	Details   map[string]any `json:"details,omitempty"`
	Meta      *Meta          `json:"meta,omitempty"`
}

// ProblemTypeBase prefixes a problem's type URI; the code follows.
const ProblemTypeBase = "urn:idem:error:"

// Content types of the two bodies.
const (
	ContentTypeJSON    = "application/json"
	ContentTypeProblem = "application/problem+json"
)

// Response headers the runner sets.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
	HeaderRetryAfter         = "Retry-After"
	HeaderPreferenceApplied  = "Preference-Applied"
)

// StatusClientClosedRequest is the status of CANCELLED.
const StatusClientClosedRequest = 499

// Response is the runner's one final answer to a call, ready for any
// surface: HTTP writes it as is, MCP puts Body in structuredContent.
type Response struct {
	Status int
	Header http.Header
	// Body is the envelope (Status < 400) or the problem object.
	Body []byte
	// Problem is the parsed problem when Status >= 400.
	Problem *Problem
	// Replayed is set when the answer came from a stored attempt.
	Replayed bool
}

// NewProblem builds the problem object of e.
func NewProblem(e *Error, meta *Meta) *Problem {
	info := e.Code.Info()
	title := info.Title
	if !e.Code.Known() {
		title = http.StatusText(e.Status)
	}
	return &Problem{
		Type: ProblemTypeBase + string(e.Code), Title: title, Status: e.Status, Detail: e.Message,
		Code: e.Code, Retryable: e.Retryable, Details: e.Details, Meta: meta,
	}
}

// problemResponse is the Response for a problem.
func problemResponse(p *Problem) Response {
	body, err := json.Marshal(p)
	if err != nil { // a detail value that cannot be encoded: drop the details
		p.Details = nil
		body, _ = json.Marshal(p)
	}
	h := http.Header{"Content-Type": {ContentTypeProblem}}
	if p.Code == CodeIdempotencyKeyInFlight || p.Code == CodeStoreUnavailable || p.Code == CodeRateLimited {
		h.Set(HeaderRetryAfter, strconv.Itoa(1))
	}
	return Response{Status: p.Status, Header: h, Body: body, Problem: p}
}

// ErrorResponse is the Response for an error raised outside the pipeline
// (routing, auth, body limits), with the same shape as the pipeline's.
func ErrorResponse(err error, meta *Meta) Response {
	return problemResponse(NewProblem(AsError(err), meta))
}

// markReplayed rewrites a stored body (envelope or problem) with
// meta.idempotency.replayed = true, keeping data byte for byte.
func markReplayed(status int, body []byte, key string) ([]byte, *Problem, error) {
	if status >= 400 {
		var p Problem
		if err := json.Unmarshal(body, &p); err != nil {
			return nil, nil, err
		}
		if p.Meta == nil {
			p.Meta = &Meta{}
		}
		p.Meta.Idempotency = &IdempotencyMeta{Key: key, Replayed: true}
		out, err := json.Marshal(&p)
		return out, &p, err
	}
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, nil, err
	}
	if e.Meta == nil {
		e.Meta = &Meta{}
	}
	e.Meta.Idempotency = &IdempotencyMeta{Key: key, Replayed: true}
	out, err := json.Marshal(&e)
	return out, nil, err
}

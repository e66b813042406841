package idem

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"time"
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

// Headers of the HTTP surface (httpapi sets the response headers from a
// Result's typed fields: Replayed, WaitApplied, Problem.Code.RetryAfter).
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
	HeaderRetryAfter         = "Retry-After"
	HeaderPreferenceApplied  = "Preference-Applied"
)

// StatusClientClosedRequest is the status of CANCELLED.
const StatusClientClosedRequest = 499

// Result is the runner's one final answer to a call, typed: a success's
// Data and Meta, or a failure's Problem. Every surface renders it once with
// Body (HTTP writes it as is, MCP puts it in structuredContent and reads
// the code from Problem); a stored answer stays bytes, so that a replay
// keeps data byte for byte.
//
// A Result's slices and pointers may be shared with the runner's replay
// cache: treat them as read-only.
type Result struct {
	Status int
	// Header holds the headers of the answer itself: those a handler set
	// (Location, ETag) or a raw operation's answer carries, as stored for
	// a replay. The surface adds its own (Content-Type, Idempotent-Replayed,
	// …) from the typed fields.
	Header http.Header
	// Data is the success data (Status < 400), the JSON the handler's
	// output encoded to, byte for byte as stored for a replay.
	Data json.RawMessage
	// Problem is the problem object when Status >= 400. Its Details hold
	// the values the runner built for a fresh answer, and JSON-decoded
	// values (map[string]any, []any, float64) for a replayed or parsed
	// one.
	Problem *Problem
	// Meta says how the answer was produced (Problem.Meta on a problem).
	Meta *Meta
	// Replayed is set when the answer came from a stored attempt.
	Replayed bool
	// WaitApplied is the wait the runner honoured on an in-flight record
	// (Invocation.Wait, capped), 0 when it did not wait.
	WaitApplied time.Duration
	// Raw is set on the answer of a raw operation's handler (DefineRaw):
	// Body is that answer's own body, not an envelope, and Data is it
	// when it is JSON. Problems the pipeline produces are not Raw.
	Raw bool
	// body is the rendering of the fields above, made once by the runner.
	body []byte
}

// Body is the answer's wire body: the envelope {data, meta} (Status < 400)
// or the problem object. The runner renders it once when it builds the
// answer; a Result built field by field is rendered on each call.
func (r Result) Body() []byte {
	if r.body != nil {
		return r.body
	}
	if r.Problem != nil {
		return marshalProblem(r.Problem)
	}
	body, _ := json.Marshal(Envelope{Data: r.Data, Meta: r.Meta})
	return body
}

// Err returns the answer's error as an *Error (its code, status, detail as
// message, retryability and details), or nil for a success.
func (r Result) Err() error {
	switch p := r.Problem; {
	case p != nil:
		return &Error{Code: p.Code, Status: p.Status, Message: p.Detail, Retryable: p.Retryable, Details: p.Details}
	case r.Status >= 400:
		return &Error{Code: CodeInternal, Status: r.Status, Message: "the answer has no problem object"}
	}
	return nil
}

// Decode unmarshals the success data into v; for a failure it returns Err
// and leaves v alone.
func (r Result) Decode(v any) error {
	if err := r.Err(); err != nil {
		return err
	}
	return json.Unmarshal(r.Data, v)
}

// ErrNotAnAnswer is ParseResult's error for a body that is neither an
// envelope nor a problem object.
var ErrNotAnAnswer = errors.New("idem: the body is not an idem envelope or problem object")

// ParseResult is the Result of an answer received as bytes (the HTTP API's
// status, headers and body), so that a remote answer reads like a local
// one; Body returns body unchanged. A failure (a status outside 200–399)
// must be a problem object with a code, a success a JSON object (the
// envelope); anything else is ErrNotAnAnswer.
func ParseResult(status int, header http.Header, body []byte) (Result, error) {
	r := Result{Status: status, Header: header, body: body}
	if status < 200 || status >= 400 {
		var p Problem
		if json.Unmarshal(body, &p) != nil || p.Code == "" {
			return Result{}, ErrNotAnAnswer
		}
		r.Problem, r.Meta = &p, p.Meta
	} else {
		var e Envelope
		if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' || json.Unmarshal(body, &e) != nil {
			return Result{}, ErrNotAnAnswer
		}
		r.Data, r.Meta = e.Data, e.Meta
	}
	r.Replayed = r.Meta != nil && r.Meta.Idempotency != nil && r.Meta.Idempotency.Replayed
	return r, nil
}

// NewProblem builds the problem object of e.
func NewProblem(e *Error, meta *Meta) *Problem {
	info := e.Code.Info()
	title := info.Title
	if !e.Code.Known() {
		title = http.StatusText(e.Status)
	}
	details := e.Details
	if t := e.Code.ProposalType(); t != "" {
		if _, set := details["type"]; !set {
			details = maps.Clone(details)
			if details == nil {
				details = map[string]any{}
			}
			details["type"] = t
		}
	}
	return &Problem{
		Type: ProblemTypeBase + string(e.Code), Title: title, Status: e.Status, Detail: e.Message,
		Code: e.Code, Retryable: e.Retryable, Details: details, Meta: meta,
	}
}

// ProposalType is the type string the MCP request-idempotency proposal
// (SEP-3182) gives the problem of code, "" for none: a problem of code
// carries it as details.type beside idem's own code (SPEC §17 rulings).
func (c Code) ProposalType() string {
	switch c {
	case CodeIdempotencyKeyInFlight:
		return "idempotency_key_in_progress"
	case CodeIdempotencyKeyReused:
		return "idempotency_key_conflict"
	}
	return ""
}

// ProblemResult is the Result for a problem, rendered.
func ProblemResult(p *Problem) Result {
	return Result{Status: p.Status, Header: http.Header{}, Problem: p, Meta: p.Meta, body: marshalProblem(p)}
}

// RetryAfter is how long a caller answered with code should wait before
// sending the same request again, 0 when the answer does not say (SPEC
// §6.4, §6.8): a key in flight, the store unavailable, the server at its
// admission bound. Each surface says it in its own terms (HTTP's
// Retry-After header).
func (c Code) RetryAfter() time.Duration {
	switch c {
	case CodeIdempotencyKeyInFlight, CodeStoreUnavailable, CodeRateLimited:
		return time.Second
	}
	return 0
}

// RetryAfter is how long the caller should wait before sending the same
// request again: details.retryAfterSeconds when the answer carries it (a
// configured rate limit), else the code's RetryAfter.
func (p *Problem) RetryAfter() time.Duration {
	if s, ok := p.Details["retryAfterSeconds"].(int); ok && s > 0 {
		return time.Duration(s) * time.Second
	}
	return p.Code.RetryAfter()
}

// marshalProblem renders p; a detail value that cannot be encoded drops
// the details.
func marshalProblem(p *Problem) []byte {
	body, err := json.Marshal(p)
	if err != nil {
		p.Details = nil
		body, _ = json.Marshal(p)
	}
	return body
}

// SuccessResult is the Result for data, rendered as the envelope.
func SuccessResult(status int, h http.Header, data json.RawMessage, meta *Meta) Result {
	body, _ := json.Marshal(Envelope{Data: data, Meta: meta})
	return Result{Status: status, Header: h, Data: data, Meta: meta, body: body}
}

// ErrorResult is the Result for an error raised outside the pipeline
// (routing, auth, body limits), with the same shape as the pipeline's.
func ErrorResult(err error, meta *Meta) Result {
	return ProblemResult(NewProblem(AsError(err), meta))
}

// ReplayResult is the replay of a stored body (envelope or problem): the
// same answer with meta.idempotency.replayed = true, data kept byte for
// byte.
func ReplayResult(status int, header http.Header, stored []byte, key string) (Result, error) {
	replayed := &IdempotencyMeta{Key: key, Replayed: true}
	if status >= 400 {
		var p Problem
		if err := json.Unmarshal(stored, &p); err != nil {
			return Result{}, err
		}
		if p.Meta == nil {
			p.Meta = &Meta{}
		}
		p.Meta.Idempotency = replayed
		body, err := json.Marshal(&p)
		return Result{Status: status, Header: header, Problem: &p, Meta: p.Meta, Replayed: true, body: body}, err
	}
	var e Envelope
	if err := json.Unmarshal(stored, &e); err != nil {
		return Result{}, err
	}
	if e.Meta == nil {
		e.Meta = &Meta{}
	}
	e.Meta.Idempotency = replayed
	body, err := json.Marshal(&e)
	// Data is the prefix of the body's rendering when stored compact, as
	// the runner stores it: share it rather than keep a copy.
	if n := len(envelopePrefix); bytes.HasPrefix(body, envelopePrefix) && bytes.HasPrefix(body[n:], e.Data) {
		e.Data = body[n : n+len(e.Data) : n+len(e.Data)]
	}
	return Result{Status: status, Header: header, Data: e.Data, Meta: e.Meta, Replayed: true, body: body}, err
}

// Footprint is the bytes r holds: its rendering, and its Data when that is
// a copy rather than a part of the rendering (ReplayResult shares it).
func (r Result) Footprint() int {
	size := len(r.body)
	if n := len(envelopePrefix); len(r.Data) > 0 && (len(r.body) <= n || &r.Data[0] != &r.body[n]) {
		size += len(r.Data)
	}
	return size
}

// envelopePrefix opens every rendered envelope.
var envelopePrefix = []byte(`{"data":`)

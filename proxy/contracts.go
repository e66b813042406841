package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/idem-run/idem"
)

// Overlay declares the contracts of operations whose document does not
// (the --contracts file, YAML or JSON): its top-level keys are
// operationIds.
type Overlay map[string]OverlayEntry

// OverlayEntry is one operation's declaration in an overlay.
type OverlayEntry struct {
	Kind       idem.RetryKind    `json:"kind"`
	Reconcile  string            `json:"reconcile,omitempty"`
	Rationale  string            `json:"rationale,omitempty"`
	SideEffect idem.SideEffect   `json:"sideEffect,omitempty"`
	TimeoutMs  int               `json:"timeoutMs,omitempty"`
	Preview    bool              `json:"preview,omitempty"`
	Approval   idem.ApprovalMode `json:"approval,omitempty"`
}

// LoadOverlay reads an overlay file; "" is an empty overlay.
func LoadOverlay(path string) (Overlay, error) {
	if path == "" {
		return Overlay{}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("contracts %s: %w", path, err)
	}
	defer f.Close()
	data, err := readLimited(f)
	if err != nil {
		return nil, fmt.Errorf("contracts %s: %w", path, err)
	}
	o, err := ParseOverlay(data)
	if err != nil {
		return nil, fmt.Errorf("contracts %s: %w", path, err)
	}
	return o, nil
}

// ParseOverlay parses an overlay in YAML or JSON (JSON is YAML). Unknown
// fields are errors, so that a misspelt kind never passes silently.
func ParseOverlay(data []byte) (Overlay, error) {
	var generic any
	if err := yaml.Unmarshal(data, &generic); err != nil {
		return nil, err
	}
	if generic == nil {
		return Overlay{}, nil
	}
	j, err := json.Marshal(generic)
	if err != nil {
		return nil, fmt.Errorf("the overlay must be a map of operationIds to objects: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var o Overlay
	if err := dec.Decode(&o); err != nil {
		return nil, fmt.Errorf("the overlay must map operationIds to {kind, reconcile, rationale, sideEffect, timeoutMs, preview, approval}: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return o, nil
}

// contractSource says where an operation's contract came from.
type contractSource string

const (
	fromExtension contractSource = "extension"
	fromOverlay   contractSource = "overlay"
	fromMethod    contractSource = "method"
)

// sideEffectOf derives a side effect from the method, when nothing
// declares one: reads for the safe methods (RFC 9110 §9.2.1), destructive
// for DELETE, writes otherwise.
func sideEffectOf(method string) idem.SideEffect {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return idem.SideEffectRead
	case "DELETE":
		return idem.SideEffectDestructive
	}
	return idem.SideEffectWrite
}

// retryFields are the members of the catalog's retry object, the only
// ones an x-idem-agent-retry extension may have.
var retryFields = map[string]bool{"kind": true, "keyRequired": true, "enforcement": true, "responseSemantics": true,
	"reconcile": true, "rationale": true, "preview": true, "secretReplayWindowMs": true, "transactional": true}

// parseExtension reads an x-idem-agent-retry value strictly: a misspelt
// member is an error, never a contract silently weaker than meant.
func parseExtension(raw any) (idem.RetryContract, error) {
	var c idem.RetryContract
	m, ok := raw.(map[string]any)
	if !ok {
		return c, fmt.Errorf("must be an object like the catalog's retry ({kind, reconcile, rationale, …}), got %T", raw)
	}
	for k := range m {
		if !retryFields[k] {
			return c, fmt.Errorf("unknown member %q (the members are those of the catalog's retry object: kind, keyRequired, enforcement, responseSemantics, reconcile, rationale, preview, secretReplayWindowMs)", k)
		}
	}
	b, _ := json.Marshal(m)
	err := json.Unmarshal(b, &c)
	return c, err
}

// undeclaredRationale is the rationale of a writing operation nobody
// declared a contract for.
const undeclaredRationale = "No retry contract is declared for this operation (no x-idem-agent-retry extension, no overlay entry): never retry it automatically; after an ambiguous result, check the current state and decide."

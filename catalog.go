package idem

import "encoding/json"

// Catalog is the operations catalog, GET /v1/operations (SPEC §4). The
// server renders it from descriptors; clients parse it with the same types.
type Catalog struct {
	Operations          []CatalogOperation   `json:"operations"`
	DirectCLIOperations []DirectCLIOperation `json:"directCliOperations"`
}

// CatalogOperation is one entry of the catalog: the fields of SPEC §4 in
// their wire order (encoding/json keeps struct field order).
type CatalogOperation struct {
	Name         string              `json:"name"`
	Method       string              `json:"method"`
	Path         string              `json:"path"`
	Summary      string              `json:"summary"`
	SideEffect   SideEffect          `json:"sideEffect"`
	Idempotent   bool                `json:"idempotent"`
	TimeoutMs    int64               `json:"timeoutMs"`
	RuntimeRetry CatalogRuntimeRetry `json:"runtimeRetry"`
	Retry        RetryContract       `json:"retry"`
	Approval     ApprovalMode        `json:"approval"`
	Surfaces     []Surface           `json:"surfaces"`
	Errors       []DeclaredError     `json:"errors"`
	InputSchema  json.RawMessage     `json:"inputSchema"`
	OutputSchema json.RawMessage     `json:"outputSchema"`
}

// CatalogRuntimeRetry is the catalog's runtimeRetry object.
type CatalogRuntimeRetry struct {
	MaxAttempts int `json:"maxAttempts"`
	BackoffMs   int `json:"backoffMs"`
}

// DirectCLIOperation is a command registered directly in the CLI, not
// projected from an operation. The catalog lists it under
// directCliOperations so that an agent learns its retry contract too.
type DirectCLIOperation struct {
	Name    string        `json:"name"`
	Command string        `json:"command"`
	Summary string        `json:"summary"`
	Retry   RetryContract `json:"retry"`
}

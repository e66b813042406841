package httpapi

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/idem-run/idem"
)

// DirectCLIOperations returns the CLI's own commands that change something
// outside one server mutation: today `idem webhook listen`.
func DirectCLIOperations() []idem.DirectCLIOperation {
	return []idem.DirectCLIOperation{{
		Name:    "webhook.listen",
		Command: "idem webhook listen",
		Summary: "Run a local webhook receiver that verifies signatures and prints deliveries.",
		Retry: idem.RetryContract{
			Kind: idem.RetryNoAutomaticRetry,
			Rationale: "A process-owning, multi-step session (tunnel, temporary endpoint, optional send, tail, cleanup), " +
				"not one server mutation that response replay can make atomic.",
		}.WithDefaults(),
	}}
}

// Catalog renders the operations catalog served at GET /v1/operations
// (SPEC §4): {"operations": [...], "directCliOperations": [...]}, compact,
// with a trailing newline. Operations are sorted by name, surfaces sorted,
// errors in declaration order ([] when none); schemas are embedded as the
// registry generated them. The same descriptors give the same bytes in
// every run and process: nothing on the output path iterates a map.
//
// Pass Runner.Descriptors, which carry the configured secret replay window.
// Catalog panics if a descriptor's schema is not valid JSON, which the
// registry never produces.
func Catalog(descs []idem.Descriptor) []byte {
	return CatalogWith(descs, DirectCLIOperations())
}

// CatalogWith is Catalog with the given direct CLI operations (none for
// idem proxy, whose operations are all its upstream's).
func CatalogWith(descs []idem.Descriptor, direct []idem.DirectCLIOperation) []byte {
	if direct == nil {
		direct = []idem.DirectCLIOperation{}
	}
	doc := idem.Catalog{
		Operations:          make([]idem.CatalogOperation, 0, len(descs)),
		DirectCLIOperations: direct,
	}
	for _, d := range sortedDescriptors(descs) {
		doc.Operations = append(doc.Operations, idem.CatalogOperation{
			Name: d.Name, Method: d.Method, Path: d.Path, Summary: d.Summary,
			SideEffect: d.SideEffect, Idempotent: d.Idempotent,
			TimeoutMs:    d.Timeout.Milliseconds(),
			RuntimeRetry: idem.CatalogRuntimeRetry{MaxAttempts: d.RuntimeRetry.MaxAttempts, BackoffMs: d.RuntimeRetry.BackoffMs},
			Retry:        d.Retry,
			Approval:     d.Approval,
			Surfaces:     sortedSurfaces(d.Surfaces),
			Errors:       append([]idem.DeclaredError{}, d.Errors...),
			InputSchema:  schemaOrEmpty(d.InputSchema),
			OutputSchema: schemaOrEmpty(d.OutputSchema),
		})
	}
	out, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("httpapi: render catalog: %v", err))
	}
	return append(out, '\n')
}

// sortedDescriptors returns a copy of descs sorted by name.
func sortedDescriptors(descs []idem.Descriptor) []idem.Descriptor {
	out := slices.Clone(descs)
	slices.SortFunc(out, func(a, b idem.Descriptor) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func sortedSurfaces(s []idem.Surface) []idem.Surface {
	out := append([]idem.Surface{}, s...)
	slices.Sort(out)
	return out
}

// schemaOrEmpty stands in {} for a missing schema, which json.Marshal
// could not embed.
func schemaOrEmpty(s json.RawMessage) json.RawMessage {
	if len(s) == 0 {
		return json.RawMessage(`{}`)
	}
	return s
}

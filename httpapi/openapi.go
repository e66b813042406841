package httpapi

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/idem-run/idem"
)

// OpenAPIVersion is the OpenAPI version of the document OpenAPI renders.
const OpenAPIVersion = "3.1.0"

// AgentRetryExtension is the operation extension that carries an
// operation's retry contract, byte for byte the catalog's "retry" object.
// It is authoritative (SPEC §10.1).
const AgentRetryExtension = "x-idem-agent-retry"

// OpenAPIInfo is the document's info object.
type OpenAPIInfo struct {
	// Title defaults to "idem".
	Title string
	// Version is the API's version; "dev" when empty.
	Version string
	// License names the terms the API is offered under (info.license.name),
	// LicenseIdentifier is their SPDX expression, or else LicenseURL links
	// them.
	// Without a License the document says that none is declared.
	License, LicenseIdentifier, LicenseURL string
	// ServerURL is the document's servers[0].url: where the operations'
	// paths are rooted ("/" when empty; a prefix such as "/idem" when the
	// handler is mounted under one).
	ServerURL string
}

// The info.license of a document whose OpenAPIInfo names no license: a
// placeholder that claims no terms (an SPDX LicenseRef names a license
// outside the SPDX list).
const (
	noLicense           = "No license declared; ask the operator of this server"
	noLicenseIdentifier = "LicenseRef-none-declared"
)

// OpenAPI renders the OpenAPI 3.1 document served at GET /openapi.json,
// compact with a trailing newline, byte-identical for the same input.
//
// Every operation exposed on the http surface is one path item operation
// with operationId = its name, its parameters (path, query, and the
// Idempotency-Key and Prefer headers of same_key_replay operations, dryRun
// on preview operations), a request body restricted to its body fields,
// the success envelope with the output schema as data, a problem response
// per client error status it can answer (the contract's key errors, input
// errors, 401, its declared errors), a default problem response, and the
// extension x-idem-agent-retry = its retry object.
//
// The one server is "/": the document describes the server it is fetched
// from, whose public URL the server cannot know.
//
// The system routes (catalog, OpenAPI, approvals, executions, attempt
// records, health, readiness, metrics) are documented too, under the tag
// "system" with operationIds "system.…". They are not catalog operations
// and carry no x-idem-agent-retry: the extension marks exactly the
// operations of the catalog. A system operationId a catalog operation
// already uses becomes "idem:system.…" (":" never occurs in operation
// names). When an operation declares a system route's method and path,
// the system route is documented, as the handler serves it.
//
// Pass Runner.Descriptors. OpenAPI panics if a descriptor's schema is not
// valid JSON, which the registry never produces.
func OpenAPI(descs []idem.Descriptor, info OpenAPIInfo) []byte {
	if info.Title == "" {
		info.Title = "idem"
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	paths := openapiPaths{}
	taken := map[string]bool{}
	tags := []string{"system"}
	tagged := map[string][]string{} // tag → its operations, sorted
	for _, d := range sortedDescriptors(descs) {
		if !slices.Contains(d.Surfaces, idem.SurfaceHTTP) {
			continue
		}
		paths.add(d.Path, d.Method, openapiOperation(d))
		taken[d.Name] = true
		tags = append(tags, operationTag(d.Name))
		tagged[operationTag(d.Name)] = append(tagged[operationTag(d.Name)], d.Name)
	}
	for _, r := range systemRoutes() {
		paths.add(r.path, r.method, r.operation(taken))
	}
	slices.Sort(tags)
	tags = slices.Compact(tags)
	tagList := make([]docObject, 0, len(tags))
	for _, t := range tags {
		desc := "Routes of idem itself, not catalog operations: they carry no " + AgentRetryExtension + "."
		if t != "system" {
			desc = "Catalog operations " + strings.Join(tagged[t], ", ") + "; each carries its retry contract in " + AgentRetryExtension + "."
		}
		tagList = append(tagList, docObj("name", t, "description", desc))
	}
	license := docObj("name", noLicense, "identifier", noLicenseIdentifier)
	if info.License != "" {
		license = docObj("name", info.License)
		switch { // OpenAPI 3.1: identifier and url exclude each other
		case info.LicenseIdentifier != "":
			license = license.with("identifier", info.LicenseIdentifier)
		case info.LicenseURL != "":
			license = license.with("url", info.LicenseURL)
		}
	}
	doc := docObj(
		"openapi", OpenAPIVersion,
		"info", docObj("title", info.Title, "version", info.Version, "license", license),
		"servers", []docObject{docObj("url", cmp.Or(info.ServerURL, "/"), "description", "The server this document is served by.")},
		"jsonSchemaDialect", "https://json-schema.org/draft/2020-12/schema",
		"security", securityRequirement(),
		"tags", tagList,
		"paths", paths.object(),
		"components", docObj(
			"securitySchemes", securitySchemes(),
			"responses", docObj(unauthenticatedResponse, unauthenticated()),
			"schemas", componentSchemas(),
		),
	)
	out, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("httpapi: render OpenAPI document: %v", err))
	}
	return append(out, '\n')
}

// securityRequirement is the document's: every route needs a bearer
// token unless it says otherwise (the public system routes).
func securityRequirement() []docObject { return []docObject{docObj("bearer", []string{})} }

func securitySchemes() docObject {
	return docObj("bearer", docObj(
		"type", "http", "scheme", "bearer",
		"description", "An API token: Authorization: Bearer <token>.",
	))
}

// unauthenticated is the shared 401 response (unauthenticatedResponse).
func unauthenticated() docObject {
	return docObj(
		"description", "UNAUTHENTICATED: no valid bearer token. "+idem.CodeUnauthenticated.Info().Action,
		"headers", docObj("WWW-Authenticate", docObj(
			"description", `The Bearer challenge (RFC 6750): Bearer realm="idem", with error="invalid_token" for an unknown token.`,
			"schema", docObj("type", "string"),
		)),
		"content", docObj(idem.ContentTypeProblem, docObj("schema", schemaRef("Problem"))),
	)
}

// replayHeaders are the headers of a same_key_replay operation's
// answers that a replay or a wait sets: Idempotent-Replayed and
// Preference-Applied.
func replayHeaders() docObject {
	return docObj(
		idem.HeaderIdempotentReplayed, docObj(
			"description", "true when the answer is a replay of the original attempt's stored result.",
			"schema", docObj("type", "string", "enum", []string{"true"}),
		),
		idem.HeaderPreferenceApplied, docObj(
			"description", "wait=N when the server waited N seconds (Prefer: wait, after its cap) for the attempt in flight with this key.",
			"schema", docObj("type", "string", "pattern", "^wait=[0-9]+$"),
		),
	)
}

// operationTag groups an operation by its name's first segment
// ("business" for business.create).
func operationTag(name string) string {
	first, _, _ := strings.Cut(name, ".")
	return first
}

// openapiOperation is the OpenAPI operation of one catalog operation.
func openapiOperation(d idem.Descriptor) docObject {
	input, _ := parseObject(d.InputSchema)
	props, _ := parseObject(input.raw("properties"))
	var required []string
	_ = json.Unmarshal(input.raw("required"), &required)

	var params []docObject
	for _, name := range idem.PathParamNames(d.Path) {
		params = append(params, docObj(
			"name", name, "in", "path", "required", true,
			"schema", propertySchema(props, name),
		))
	}
	var bodyNames []string
	for _, p := range d.Params {
		switch p.In {
		case "query":
			params = append(params, docObj(
				"name", p.Name, "in", "query", "required", slices.Contains(required, p.Name),
				"schema", propertySchema(props, p.Name),
			))
		case "header":
			params = append(params, docObj(
				"name", p.Header, "in", "header", "required", slices.Contains(required, p.Name),
				"description", "The argument "+p.Name+" (its name on MCP and in the CLI).",
				"schema", propertySchema(props, p.Name),
			))
		case "body":
			bodyNames = append(bodyNames, p.Name)
		}
	}
	params = append(params, controlParameters(d.Retry)...)
	keyed := d.Retry.Kind == idem.RetrySameKeyReplay

	op := docObj(
		"operationId", d.Name,
		"summary", d.Summary,
		"description", operationDescription(d),
		"tags", []string{operationTag(d.Name)},
	)
	if len(params) > 0 {
		op = op.with("parameters", params)
	}
	if len(bodyNames) > 0 {
		body, bodyRequired := bodySchema(input, props, required, bodyNames)
		rb := docObj()
		if bodyRequired {
			rb = rb.with("required", true)
		}
		op = op.with("requestBody", rb.with("content", docObj(idem.ContentTypeJSON, docObj("schema", body))))
	}
	return op.with("responses", operationResponses(d, keyed)).with(AgentRetryExtension, d.Retry)
}

// operationDescription is the summary, the retry contract's kind and
// rationale, and the read to reconcile with.
func operationDescription(d idem.Descriptor) string {
	var b strings.Builder
	b.WriteString(d.Summary)
	b.WriteString("\n\nRetry contract: ")
	b.WriteString(string(d.Retry.Kind))
	b.WriteString(".")
	if d.Retry.Rationale != "" {
		b.WriteString(" ")
		b.WriteString(d.Retry.Rationale)
	}
	if d.Retry.Reconcile != "" {
		b.WriteString(" Reconcile with ")
		b.WriteString(d.Retry.Reconcile)
		b.WriteString(".")
	}
	return b.String()
}

// propertySchema is the input schema's property name, without "$schema";
// a string schema when the input schema does not describe it.
func propertySchema(props docObject, name string) any {
	if raw := props.raw(name); raw != nil {
		return withoutDialect(raw)
	}
	return docObj("type", "string")
}

// bodySchema is the input schema restricted to the body fields: the same
// object with only their properties and required entries. It reports
// whether any body field is required.
func bodySchema(input, props docObject, required, bodyNames []string) (docObject, bool) {
	var bodyProps docObject
	for _, m := range props {
		if slices.Contains(bodyNames, m.key) {
			bodyProps = append(bodyProps, m)
		}
	}
	var bodyRequired []string
	for _, name := range required {
		if slices.Contains(bodyNames, name) {
			bodyRequired = append(bodyRequired, name)
		}
	}
	var out docObject
	for _, m := range input {
		switch m.key {
		case "$schema": // the document's jsonSchemaDialect says it
		case "properties":
			out = out.with("properties", bodyProps)
		case "required":
			if len(bodyRequired) > 0 {
				out = out.with("required", bodyRequired)
			}
		default:
			out = append(out, m)
		}
	}
	return out, len(bodyRequired) > 0
}

// controlParameters are the control inputs of an operation with contract
// c, as httpapi reads them (ParseControls): dryRun on a preview
// operation; Idempotency-Key and Prefer on a same_key_replay one. Every
// other kind takes no key (a fresh_read ignores one, the others refuse
// it), so none is documented there.
func controlParameters(c idem.RetryContract) []docObject {
	var params []docObject
	if c.Preview {
		params = append(params, docObj(
			"name", idem.DryRunParam, "in", "query", "required", false,
			"description", "true runs the preview: nothing changes and nothing is stored; the answer carries meta.dryRun: true. "+
				"Send no Idempotency-Key with it: the live call needs its own key.",
			"schema", docObj("type", "boolean"),
		))
	}
	if c.Kind == idem.RetrySameKeyReplay {
		params = append(params, idempotencyKeyParameter(), preferParameter())
	}
	return params
}

// idempotencyKeyParameter is the Idempotency-Key header of a same_key_replay
// operation. It is not required in OpenAPI's sense, which would bind every
// caller: the server refuses a call without it only from the principal
// kinds that must send one (keyKinds), and the description says which.
func idempotencyKeyParameter() docObject {
	return docObj(
		"name", idem.HeaderIdempotencyKey, "in", "header", "required", false,
		"description", "Required from principals of kind "+strings.Join(keyKinds(), ", ")+
			" (without it they get 400 IDEMPOTENCY_KEY_REQUIRED and nothing runs); other kinds (browser) may omit it. "+
			"This operation replays by key (same_key_replay). Generate an opaque key, record it in durable task state "+
			"before the first send, and after an ambiguous outcome resend the byte-equivalent request with the same key; "+
			"a replay is the original attempt's result, not current state. 1 to 255 characters from "+
			"A-Z a-z 0-9 - _ . ~ : / + = @, bare or as an RFC 8941 string. Never together with dryRun=true.",
		"schema", docObj("type", "string", "pattern", `^([A-Za-z0-9._~:/+=@-]{1,255}|"[A-Za-z0-9._~:/+=@-]{1,255}")$`),
	)
}

// keyKinds are the principal kinds that must send Idempotency-Key
// (Principal.MustSendKey).
func keyKinds() []string {
	var out []string
	for _, k := range []idem.PrincipalKind{idem.KindAgent, idem.KindCLISession, idem.KindServiceAccount, idem.KindBrowser} {
		if (idem.Principal{Kind: k}).MustSendKey() {
			out = append(out, string(k))
		}
	}
	return out
}

func preferParameter() docObject {
	return docObj(
		"name", "Prefer", "in", "header", "required", false,
		"description", "RFC 7240 wait=N: when the attempt with this key is still in flight, wait up to N seconds "+
			"(capped by the server, 30 by default) for its result instead of answering 409 IDEMPOTENCY_KEY_IN_FLIGHT; "+
			"the answer then carries Preference-Applied.",
		"schema", docObj("type", "string"),
		"example", "wait=10",
	)
}

// operationResponses: the success envelope, one problem response per
// client error status (clientErrors), and the default problem.
func operationResponses(d idem.Descriptor, keyed bool) docObject {
	if d.SuccessStatus == 0 {
		d.SuccessStatus = http.StatusOK
	}
	output := withoutDialect(d.OutputSchema)
	successDesc := http.StatusText(d.SuccessStatus) + ": the envelope, with the operation's output as data."
	var dryRunResponse docObject
	if d.Retry.Preview {
		preview := docObj("description", "The preview answered to dryRun=true (meta.dryRun: true).")
		if d.SuccessStatus == http.StatusOK {
			output = docObj("anyOf", []any{output, preview})
			successDesc += " With dryRun=true, data is the preview and meta.dryRun is true."
		} else {
			dryRunResponse = docObj(
				"description", "OK: the preview answered to dryRun=true (meta.dryRun: true).",
				"content", docObj(idem.ContentTypeJSON, docObj("schema", operationEnvelopeSchema(preview))),
			)
		}
	}
	success := docObj("description", successDesc)
	if keyed {
		success = docObj(
			"description", successDesc+" A replay of a completed attempt carries the original status and data, "+
				"meta.idempotency.replayed: true and the header Idempotent-Replayed: true.",
			"headers", replayHeaders(),
		)
	}
	if d.Location {
		headers, _ := success.value("headers").(docObject)
		success = success.without("headers").with("headers", headers.with("Location", docObj(
			"description", "The created resource's URL path; a replay carries the original's.",
			"schema", docObj("type", "string"),
		)))
	}
	success = success.with("content", docObj(idem.ContentTypeJSON, docObj("schema", operationEnvelopeSchema(output))))

	responses := docObj(strconv.Itoa(d.SuccessStatus), success)
	if dryRunResponse != nil {
		responses = responses.with(strconv.Itoa(http.StatusOK), dryRunResponse)
	}
	byStatus := answeredProblems(d, hasBodyParams(d))
	for _, e := range d.Errors {
		if e.Status == d.SuccessStatus || (dryRunResponse != nil && e.Status == http.StatusOK) {
			continue
		}
		byStatus[e.Status] = append(byStatus[e.Status], string(e.Code)+" (declared business outcome): "+e.Message)
	}
	for _, status := range slices.Sorted(maps.Keys(byStatus)) {
		responses = responses.with(strconv.Itoa(status), problemsResponse(status, byStatus[status]))
	}
	return responses.with("default", defaultProblemResponse())
}

func defaultProblemResponse() docObject {
	return problemResponse("A problem (RFC 9457) with a stable code; docs/errors.md lists the codes and what to do.")
}

// problemsResponse is the response of one status whose problems are
// entries ("CODE: when. What to do."): the shared Unauthenticated
// response for 401, else a problem response listing them, with
// Retry-After when one of its codes sends it (Code.RetryAfter).
func problemsResponse(status int, entries []string) docObject {
	if status == http.StatusUnauthorized {
		return docObj("$ref", "#/components/responses/"+unauthenticatedResponse)
	}
	r := problemResponse("- " + strings.Join(entries, "\n- "))
	var after []string
	for _, e := range entries {
		if c := entryCode(e); c.RetryAfter() > 0 {
			after = append(after, string(c))
		}
	}
	if len(after) > 0 {
		r = r.with("headers", docObj(idem.HeaderRetryAfter, retryAfterHeader(after)))
	}
	return r
}

// entryCode is the code an entry of answeredProblems starts with.
func entryCode(entry string) idem.Code {
	if i := strings.IndexAny(entry, ": "); i >= 0 {
		entry = entry[:i]
	}
	return idem.Code(entry)
}

func retryAfterHeader(codes []string) docObject {
	return docObj(
		"description", "Seconds to wait before sending the same request again (with the same key), with "+strings.Join(codes, ", ")+".",
		"schema", docObj("type", "string", "pattern", "^[0-9]+$"),
	)
}

// hasBodyParams reports whether any of d's arguments travels in the body.
func hasBodyParams(d idem.Descriptor) bool {
	return slices.ContainsFunc(d.Params, func(p idem.Param) bool { return p.In == "body" })
}

// answeredProblems are the problems idem itself answers on an operation's
// route, by status: clientErrors and serverErrors. body says whether the
// route takes a request body.
func answeredProblems(d idem.Descriptor, body bool) map[int][]string {
	out := clientErrors(d, body)
	for status, entries := range serverErrors(d) {
		out[status] = append(out[status], entries...)
	}
	return out
}

// unauthenticatedResponse names the shared 401 response component.
const unauthenticatedResponse = "Unauthenticated"

// clientErrors are the idem codes an operation's route answers with a 4xx
// before or instead of its handler, by status: the contract checks of SPEC
// §6.4 that apply to its kind, input validation, and authentication. Each
// entry is "CODE: when. What to do." (the code's action; when is left out
// where the action says it); 401 is the shared Unauthenticated response.
func clientErrors(d idem.Descriptor, body bool) map[int][]string {
	out := map[int][]string{}
	add := codeAdder(out)
	keyed := d.Retry.Kind == idem.RetrySameKeyReplay
	add(idem.CodeInvalidInput, "the input breaks the operation's schema, or a control parameter (dryRun) is not exactly true or false; nothing ran.")
	if d.Retry.ReadsKey() {
		add(idem.CodeIdempotencyKeyInvalid, "a malformed or repeated Idempotency-Key header.")
	}
	switch {
	case keyed:
		add(idem.CodeIdempotencyKeyNotSupported, "an Idempotency-Key together with dryRun=true.")
		add(idem.CodeIdempotencyKeyRequired, "no Idempotency-Key on a live call from a principal of kind "+strings.Join(keyKinds(), ", ")+"; nothing ran.")
	case d.Retry.ReadsKey():
		add(idem.CodeIdempotencyKeyNotSupported, "an Idempotency-Key on an operation of kind "+string(d.Retry.Kind)+", which does not replay by key.")
	}
	if !d.Retry.Preview {
		add(idem.CodeDryRunNotSupported, "dryRun=true on an operation without a preview.")
	}
	if body {
		add(idem.CodeRequestTooLarge, "the body is over the server's limit.")
		add(idem.CodeRequestTimeout, "")
	}
	if keyed {
		add(idem.CodeIdempotencyKeyInFlight, "details.type is idempotency_key_in_progress (SEP-3182).")
		add(idem.CodeIdempotencyResultIndeterminate, "details.reconcile is "+d.Retry.Reconcile+".")
		add(idem.CodeIdempotencyKeyReused, "the request did not run (its method, path, query or body differ from the key's first request); details.type is idempotency_key_conflict (SEP-3182).")
		if d.Retry.Enforcement == idem.EnforceTransactionalSecretReplay {
			add(idem.CodeIdempotencyResultExpired, "details.reconcile is "+d.Retry.Reconcile+".")
		}
	}
	out[http.StatusUnauthorized] = nil
	return out
}

// serverErrors are the 429 and 5xx problems idem itself answers on an
// operation's route: admission, the store, the execution's failure or
// timeout, and for a raw operation (idem proxy) an upstream it could not
// reach. On a keyed call a 5xx produced after the handler started is
// answered retryable: false with details.reconcile (SPEC §6.4).
func serverErrors(d idem.Descriptor) map[int][]string {
	out := map[int][]string{}
	add := codeAdder(out)
	add(idem.CodeRateLimited, "")
	add(idem.CodeStoreUnavailable, "")
	add(idem.CodeExecutionFailed, "")
	add(idem.CodeInternal, "")
	add(idem.CodeTimeout, "")
	if d.Raw {
		add(idem.CodeUpstreamUnavailable, "")
	} else {
		add(idem.CodeOutputInvalid, "")
	}
	return out
}

// codeAdder returns a function that adds the entry "CODE: when. What to
// do." (when left out where the code's action says it) under the code's
// status.
func codeAdder(out map[int][]string) func(c idem.Code, when string) {
	return func(c idem.Code, when string) {
		info := c.Info()
		if when != "" {
			when += " "
		}
		out[info.Status] = append(out[info.Status], string(c)+": "+when+info.Action)
	}
}

// envelopeSchema is the success envelope of a system route, {"data": …},
// with data described by data.
func envelopeSchema(data any) docObject {
	return docObj(
		"type", "object",
		"required", []string{"data"},
		"properties", docObj("data", data, "meta", schemaRef("Meta")),
	)
}

// operationEnvelopeSchema is the success envelope of an operation, which
// always carries meta (SPEC §9).
func operationEnvelopeSchema(data any) docObject {
	return docObj(
		"type", "object",
		"required", []string{"data", "meta"},
		"properties", docObj("data", data, "meta", schemaRef("Meta")),
	)
}

func problemResponse(description string) docObject {
	return docObj(
		"description", description,
		"content", docObj(idem.ContentTypeProblem, docObj("schema", schemaRef("Problem"))),
	)
}

func schemaRef(name string) docObject { return docObj("$ref", "#/components/schemas/"+name) }

// withoutDialect drops a schema's "$schema": inside the document it would
// sit in a subschema, where JSON Schema forbids it, and the document's
// jsonSchemaDialect states the dialect once.
func withoutDialect(raw json.RawMessage) any {
	s, ok := parseObject(raw)
	if !ok {
		if len(raw) == 0 {
			return docObj()
		}
		return raw
	}
	out := docObject{}
	for _, m := range s {
		if m.key != "$schema" {
			out = append(out, m)
		}
	}
	return out
}

// systemRoute documents one route of idem itself (SPEC §8, §10.1).
type systemRoute struct {
	method, path, id, summary, description string
	// public routes need no token.
	public   bool
	params   []docObject
	body     docObject
	statusOK docObject // the 200 response
	// errors are its client errors by status, "CODE: when" each; a route
	// that is not public answers 401 as well.
	errors map[int][]string
	// unready documents 503 STORE_UNAVAILABLE (readyz).
	unready bool
}

func (r systemRoute) operation(taken map[string]bool) docObject {
	id := r.id
	if taken[id] {
		id = "idem:" + id
	}
	op := docObj("operationId", id, "summary", r.summary)
	if r.description != "" {
		op = op.with("description", r.description)
	}
	op = op.with("tags", []string{"system"})
	if r.public {
		op = op.with("security", []docObject{})
	}
	if len(r.params) > 0 {
		op = op.with("parameters", r.params)
	}
	if r.body != nil {
		op = op.with("requestBody", docObj("content", docObj(idem.ContentTypeJSON, docObj("schema", r.body))))
	}
	responses := docObj("200", r.statusOK)
	errs := maps.Clone(r.errors)
	if !r.public {
		if errs == nil {
			errs = map[int][]string{}
		}
		errs[http.StatusUnauthorized] = nil
	}
	for _, status := range slices.Sorted(maps.Keys(errs)) {
		if status == http.StatusUnauthorized {
			responses = responses.with("401", docObj("$ref", "#/components/responses/"+unauthenticatedResponse))
			continue
		}
		responses = responses.with(strconv.Itoa(status), problemResponse("- "+strings.Join(errs[status], "\n- ")))
	}
	if len(errs) == 0 {
		// A public read refuses no well-formed request; what a client can
		// still meet on its path is a problem object too.
		responses = responses.with("4XX", problemResponse(
			"A client error, as a problem object with a stable code: for example 405 METHOD_NOT_ALLOWED, with Allow, for a method this path does not serve."))
	}
	if r.unready {
		responses = responses.with("503", problemResponse("STORE_UNAVAILABLE: the store is unreachable."))
	}
	return op.with("responses", responses.with("default", problemResponse("A problem (RFC 9457) with a stable code.")))
}

func systemRoutes() []systemRoute {
	data := func(description string, schema any) docObject {
		return docObj("description", description, "content", docObj(idem.ContentTypeJSON, docObj("schema", envelopeSchema(schema))))
	}
	pathID := func(name, description string) docObject {
		return docObj("name", name, "in", "path", "required", true, "description", description, "schema", docObj("type", "string"))
	}
	status := func(value string) docObject {
		return docObj("type", "object", "required", []string{"status"}, "properties", docObj("status", docObj("const", value)))
	}
	// errs groups "CODE: when" entries by the code's status.
	errs := func(entries ...any) map[int][]string {
		out := map[int][]string{}
		for i := 0; i+1 < len(entries); i += 2 {
			c := entries[i].(idem.Code)
			out[c.Info().Status] = append(out[c.Info().Status], string(c)+": "+entries[i+1].(string))
		}
		return out
	}
	decision := func(verb, summary string) systemRoute {
		return systemRoute{
			method: "POST", path: "/v1/approvals/{id}/" + verb, id: "system.approvals." + verb,
			summary: summary,
			description: "Repeating the decision the approval already carries returns it unchanged; " +
				"a different decision answers 409 APPROVAL_ALREADY_DECIDED, a pending approval past its expiry 409 APPROVAL_EXPIRED.",
			params: []docObject{pathID("id", "The approval id.")},
			body: docObj("type", "object", "properties", docObj("reason", docObj(
				"type", "string", "description", "Why; shown to the requester."))),
			statusOK: data("OK: the approval as decided.", schemaRef("Approval")),
			errors: errs(
				idem.CodeInvalidInput, "the body is not {\"reason\": \"…\"}.",
				idem.CodeForbidden, "the caller lacks the approver role.",
				idem.CodeSelfApprovalForbidden, "the caller requested this approval; another approver must decide it.",
				idem.CodeApprovalNotFound, "no approval with this id is visible to the caller.",
				idem.CodeApprovalAlreadyDecided, "the approval carries the other decision.",
				idem.CodeApprovalExpired, "the approval passed its expiry undecided.",
				idem.CodeRequestTooLarge, "the body is over the limit.",
			),
		}
	}
	return []systemRoute{
		{
			method: "GET", path: "/v1/operations", id: "system.operations.list", public: true,
			summary:     "The operations catalog: every operation with its retry contract.",
			description: "Read retry.kind, keyRequired, enforcement, responseSemantics, reconcile and rationale before automating an operation.",
			statusOK: docObj("description", "OK: the catalog (not enveloped).",
				"content", docObj(idem.ContentTypeJSON, docObj("schema", schemaRef("Catalog")))),
		},
		{
			method: "GET", path: "/openapi.json", id: "system.openapi.show", public: true,
			summary:  "This OpenAPI document.",
			statusOK: docObj("description", "OK: the document.", "content", docObj(idem.ContentTypeJSON, docObj("schema", docObj("type", "object")))),
		},
		{
			method: "GET", path: "/v1/approvals", id: "system.approvals.list",
			summary: "List approvals: the caller's own requests, or every approval of the org for an approver.",
			params: []docObject{docObj("name", "status", "in", "query", "required", false, "schema", docObj(
				"type", "string", "enum", []string{"pending", "approved", "rejected", "consumed", "expired"}))},
			statusOK: data("OK: the approvals, newest first.", docObj("type", "array", "items", schemaRef("Approval"))),
			errors:   errs(idem.CodeInvalidInput, "status is not one of pending, approved, rejected, consumed, expired."),
		},
		{
			method: "GET", path: "/v1/approvals/{id}", id: "system.approvals.show",
			summary:  "Show an approval (its requester, or an approver of its org).",
			params:   []docObject{pathID("id", "The approval id.")},
			statusOK: data("OK: the approval.", schemaRef("Approval")),
			errors:   errs(idem.CodeApprovalNotFound, "no approval with this id is visible to the caller."),
		},
		decision("approve", "Approve a pending approval (approver role; not its requester)."),
		decision("reject", "Reject a pending approval (approver role; not its requester)."),
		{
			method: "GET", path: "/v1/executions/{id}", id: "system.executions.show",
			summary:  "Show an execution with its audit events (its principal, or an approver of its org).",
			params:   []docObject{pathID("id", "The execution id (meta.executionId).")},
			statusOK: data("OK: the execution.", schemaRef("Execution")),
			errors:   errs(idem.CodeNotFound, "no execution with this id is visible to the caller."),
		},
		{
			method: "GET", path: "/v1/attempts/{key}", id: "system.attempts.show",
			summary:  "Show the caller's own attempt record for an idempotency key.",
			params:   []docObject{pathID("key", "The idempotency key, percent-encoded (/ as %2F).")},
			statusOK: data("OK: the attempt record.", schemaRef("AttemptRecord")),
			errors:   errs(idem.CodeNotFound, "the caller has no attempt record for this key (never used, or forgotten after retention)."),
		},
		{
			method: "GET", path: "/healthz", id: "system.healthz", public: true,
			summary:  "Liveness: the process answers.",
			statusOK: data("OK.", status("ok")),
		},
		{
			method: "GET", path: "/readyz", id: "system.readyz", public: true,
			summary:  "Readiness: the store is reachable.",
			statusOK: data("OK: ready.", status("ready")), unready: true,
		},
		{
			method: "GET", path: "/metrics", id: "system.metrics", public: true,
			summary: "Prometheus metrics, when the server is configured with them.",
			statusOK: docObj("description", "OK: the Prometheus text exposition format.",
				"content", docObj("text/plain", docObj("schema", docObj("type", "string")))),
		},
	}
}

// componentSchemas are the wire objects of SPEC §4, §8, §9 and §10.1.
func componentSchemas() docObject {
	str := docObj("type", "string")
	nullableStr := docObj("type", []string{"string", "null"})
	dateTime := docObj("type", "string", "format", "date-time")
	nullableDateTime := docObj("type", []string{"string", "null"}, "format", "date-time")
	integer := docObj("type", "integer")
	boolean := docObj("type", "boolean")
	object := func(required []string, props ...any) docObject {
		o := docObj("type", "object")
		if len(required) > 0 {
			o = o.with("required", required)
		}
		return o.with("properties", docObj(props...))
	}
	enum := func(values ...string) docObject { return docObj("type", "string", "enum", values) }

	return docObj(
		"Problem", object([]string{"type", "title", "status", "detail", "code", "retryable"},
			"type", docObj("type", "string", "description", idem.ProblemTypeBase+"CODE"),
			"title", str,
			"status", docObj("type", "integer", "description", "The HTTP status."),
			"detail", str,
			"code", docObj("type", "string", "description", "The stable error code (docs/errors.md) or a declared business error."),
			"retryable", docObj("type", "boolean", "description", "Whether repeating the same request unchanged may succeed."),
			"details", docObj("type", "object"),
			"meta", schemaRef("Meta"),
		).with("description", "RFC 9457 problem details with idem's extension members."),
		"Meta", object(nil,
			"operation", str,
			"executionId", str,
			"attempts", integer,
			"dryRun", boolean,
			"idempotency", schemaRef("IdempotencyMeta"),
		).with("description", "How the answer was produced; idempotency is present on every answer to a keyed call."),
		"IdempotencyMeta", object([]string{"key", "replayed"},
			"key", str,
			"replayed", boolean,
		),
		"RetryContract", object([]string{"kind", "keyRequired", "enforcement", "responseSemantics", "reconcile", "rationale", "preview"},
			"kind", enum("fresh_read", "same_key_replay", "convergent", "intrinsic_replay", "no_automatic_retry", "preview"),
			"keyRequired", boolean,
			"enforcement", enum("fresh_read", "resource_identity", "idempotency_reservation", "transactional_secret_replay", "server_derived_transition", "none"),
			"responseSemantics", enum("current_state", "original_attempt_result", "point_in_time", "preview"),
			"reconcile", nullableStr,
			"rationale", str,
			"preview", boolean,
			"transactional", boolean.with("description", "The operation's effects commit in one transaction with its attempt record (SPEC §6.7): a failure leaves nothing, answers retryable and frees the key."),
			"secretReplayWindowMs", integer,
		).with("description", "What a retry means (SPEC §4); the value of "+AgentRetryExtension+"."),
		"Catalog", object([]string{"operations", "directCliOperations"},
			"operations", docObj("type", "array", "items", object(
				[]string{"name", "method", "path", "summary", "sideEffect", "idempotent", "timeoutMs", "runtimeRetry", "retry", "approval", "surfaces", "errors", "inputSchema", "outputSchema"},
				"name", str,
				"method", str,
				"path", str,
				"summary", str,
				"sideEffect", enum("none", "read", "write", "destructive", "external"),
				"idempotent", boolean,
				"timeoutMs", integer,
				"runtimeRetry", object([]string{"maxAttempts", "backoffMs"}, "maxAttempts", integer, "backoffMs", integer),
				"retry", schemaRef("RetryContract"),
				"approval", enum("none", "always", "policy"),
				"surfaces", docObj("type", "array", "items", enum("cli", "http", "mcp")),
				"errors", docObj("type", "array", "items", object([]string{"code", "status", "message"}, "code", str, "status", integer, "message", str)),
				"inputSchema", docObj("type", "object"),
				"outputSchema", docObj("type", "object"),
			)),
			"directCliOperations", docObj("type", "array", "items", object(
				[]string{"name", "command", "summary", "retry"},
				"name", str,
				"command", str,
				"summary", str,
				"retry", schemaRef("RetryContract"),
			)),
		),
		"Approval", object([]string{"id", "operation", "status", "requestedBy", "reason", "decidedBy", "decisionReason", "fingerprint", "input", "createdAt", "expiresAt", "decidedAt", "consumedAt", "executionId"},
			"id", str,
			"operation", str,
			"status", enum("pending", "approved", "rejected", "consumed", "expired"),
			"requestedBy", str,
			"reason", docObj("type", "string", "description", "The policy's reason."),
			"decidedBy", nullableStr,
			"decisionReason", nullableStr,
			"fingerprint", str,
			"input", docObj("description", "The validated input the approval is bound to."),
			"createdAt", dateTime,
			"expiresAt", dateTime,
			"decidedAt", nullableDateTime,
			"consumedAt", nullableDateTime,
			"executionId", nullableStr,
			"rule", docObj("type", "string", "description", "The configured rule (SPEC §8.1) that asked for the approval; absent when a Go-coded policy or the operation did."),
		),
		"Execution", object([]string{"id", "operation", "principal", "attempts", "outcome", "code", "reinvocationOf", "startedAt", "finishedAt", "events"},
			"id", str,
			"operation", str,
			"principal", str,
			"attempts", integer,
			"outcome", enum("running", "succeeded", "failed"),
			"code", nullableStr,
			"reinvocationOf", nullableStr,
			"startedAt", dateTime,
			"finishedAt", nullableDateTime,
			"events", docObj("type", "array", "items", schemaRef("AuditEvent")),
		),
		"AuditEvent", object([]string{"type", "at"},
			"type", str,
			"at", dateTime,
			"attempt", integer,
			"code", str,
			"previousErrorCode", str,
			"attempts", integer,
			"durationMs", integer,
			"data", docObj("type", "object", "additionalProperties", str),
		),
		"AttemptRecord", object([]string{"key", "operation", "state", "fingerprint", "executionId", "status", "createdAt", "completedAt", "expiresAt"},
			"key", str,
			"operation", str,
			"state", enum("in_flight", "completed", "indeterminate", "expired"),
			"fingerprint", str,
			"executionId", str,
			"status", docObj("type", []string{"integer", "null"}, "description", "The stored HTTP status; null while in flight or indeterminate by lease."),
			"createdAt", dateTime,
			"completedAt", nullableDateTime,
			"expiresAt", docObj("type", "string", "format", "date-time", "description", "When the record is forgotten."),
			"secretExpiresAt", docObj("type", "string", "format", "date-time", "description", "Secret results only: when the secret can no longer be replayed."),
		),
	)
}

// openapiPaths collects operations by path and method.
type openapiPaths map[string]map[string]docObject

func (p openapiPaths) add(path, method string, op docObject) {
	if p[path] == nil {
		p[path] = map[string]docObject{}
	}
	p[path][strings.ToLower(method)] = op
}

// openapiMethods is the order of operations in a path item.
var openapiMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// object renders the paths object: paths sorted, methods in a fixed order.
func (p openapiPaths) object() docObject {
	paths := make([]string, 0, len(p))
	for path := range p {
		paths = append(paths, path)
	}
	slices.Sort(paths)
	out := make(docObject, 0, len(paths))
	for _, path := range paths {
		item := docObject{}
		for _, m := range openapiMethods {
			if op, ok := p[path][m]; ok {
				item = item.with(m, op)
			}
		}
		out = out.with(path, item)
	}
	return out
}

// docObject is a JSON object that keeps its members in the order they were
// added, so that a document's bytes never depend on map iteration.
type docObject []docMember

type docMember struct {
	key   string
	value any
}

// docObj builds a docObject from alternating keys and values.
func docObj(kv ...any) docObject {
	if len(kv)%2 != 0 {
		panic("httpapi: docObj needs key, value pairs")
	}
	o := make(docObject, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		o = append(o, docMember{key: kv[i].(string), value: kv[i+1]})
	}
	return o
}

// with returns o with one more member.
func (o docObject) with(key string, value any) docObject {
	return append(o, docMember{key: key, value: value})
}

// value returns the value of member key; nil when absent.
func (o docObject) value(key string) any {
	for _, m := range o {
		if m.key == key {
			return m.value
		}
	}
	return nil
}

// without returns o without member key.
func (o docObject) without(key string) docObject {
	out := make(docObject, 0, len(o))
	for _, m := range o {
		if m.key != key {
			out = append(out, m)
		}
	}
	return out
}

// raw returns the member key of a parsed object; nil when absent.
func (o docObject) raw(key string) json.RawMessage {
	for _, m := range o {
		if m.key == key {
			if r, ok := m.value.(json.RawMessage); ok {
				return r
			}
		}
	}
	return nil
}

// MarshalJSON writes the members in order.
func (o docObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(m.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(m.value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.key, err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// parseObject splits a JSON object into its members in document order,
// each value a json.RawMessage. It reports false when raw is not an object.
func parseObject(raw json.RawMessage) (docObject, bool) {
	if len(raw) == 0 {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	out := docObject{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, false
		}
		out = append(out, docMember{key: key, value: value})
	}
	return out, true
}

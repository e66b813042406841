package httpapi

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/idem-run/idem"
)

// OpenAPIOver renders the OpenAPI document of a server whose operations
// were declared from base, an upstream's OpenAPI 3.0 or 3.1 document
// (idem proxy, SPEC §15), compact with a trailing newline and
// byte-identical for the same input. It describes what that server
// serves: base's paths, operationIds, summaries, parameters, bodies,
// answers and schemas as they are, and on each operation of descs what
// OpenAPI documents on a typed one, from the same functions:
//
//   - the control inputs of its contract (controlParameters): dryRun on a
//     preview operation, Idempotency-Key and Prefer on a same_key_replay
//     one, and none on the other kinds (base's own declarations of these
//     headers, on the operation or its path item, are dropped: idem reads
//     them and never forwards them);
//   - the problems idem answers itself (answeredProblems), each status
//     added to base's answers, or merged into an answer base declares
//     for it (its description extended, application/problem+json added);
//   - the headers idem sets (Idem-Execution-Id on every answer;
//     Idempotent-Replayed and Preference-Applied on the upstream's answers
//     of a same_key_replay operation), a default
//     problem answer, and x-idem-agent-retry = its retry contract;
//   - idem's bearer security in place of base's (the upstream's security
//     is the proxy's business, --upstream-auth);
//
// and for the whole document: servers (info.ServerURL, "/" when empty),
// the system routes (as OpenAPI documents them, tagged "system"), idem's
// component schemas and the Unauthenticated response (renamed "Idem…"
// where base has a component of the name), and info.license when base
// has none. info's title and version are base's. In a 3.0 document idem's
// schemas are written in 3.0's terms (nullable for a "null" type, enum
// for const).
//
// An operation of descs that base does not have is left out; so is one
// not exposed on the http surface.
func OpenAPIOver(base []byte, descs []idem.Descriptor, info OpenAPIInfo) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(base, &doc); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	version, _ := doc["openapi"].(string)
	if !strings.HasPrefix(version, "3.") {
		return nil, fmt.Errorf("openapi document: openapi %q is not 3.0 or 3.1", version)
	}
	v30 := strings.HasPrefix(version, "3.0")
	used := localRefs(doc)
	components := objectAt(doc, "components")
	schemas, responses := objectAt(components, "schemas"), objectAt(components, "responses")

	// idem's components, renamed where base has the name; part renders
	// one of idem's fragments as generic JSON pointing at them.
	renames := map[string]string{}
	rename := func(group map[string]any, kind, name string) string {
		to := name
		for group[to] != nil {
			to = "Idem" + to
		}
		if to != name {
			renames["#/components/"+kind+"/"+name] = "#/components/" + kind + "/" + to
		}
		return to
	}
	own := componentSchemas()
	ownNames := make([]string, len(own))
	for i, m := range own {
		ownNames[i] = rename(schemas, "schemas", m.key)
	}
	unauthName := rename(responses, "responses", unauthenticatedResponse)
	part := func(v any) any { return genericPart(v, renames, v30) }
	for i, m := range own {
		schemas[ownNames[i]] = part(m.value)
	}
	responses[unauthName] = part(unauthenticated())
	components["securitySchemes"] = part(securitySchemes())
	doc["security"] = part(securityRequirement())
	doc["servers"] = part([]docObject{docObj("url", cmp.Or(info.ServerURL, "/"),
		"description", "The idem proxy this document is served by: it runs every operation through idem's pipeline and forwards it to the API it fronts.")})
	infoObj := objectAt(doc, "info")
	if infoObj["license"] == nil {
		license := docObj("name", noLicense)
		if !v30 { // identifier is 3.1's
			license = license.with("identifier", noLicenseIdentifier)
		}
		infoObj["license"] = part(license)
	}

	paths := objectAt(doc, "paths")
	taken := map[string]bool{}
	for _, d := range sortedDescriptors(descs) {
		if !slices.Contains(d.Surfaces, idem.SurfaceHTTP) {
			continue
		}
		item, _ := paths[d.Path].(map[string]any)
		op, _ := item[strings.ToLower(d.Method)].(map[string]any)
		if op == nil {
			continue
		}
		taken[d.Name] = true
		describeRawOperation(doc, op, d, part)
		if list, ok := item["parameters"].([]any); ok { // the path item's apply to each of its operations
			item["parameters"] = slices.DeleteFunc(slices.Clone(list), func(p any) bool { return readByIdem(resolved(doc, p)) })
			if len(item["parameters"].([]any)) == 0 {
				delete(item, "parameters")
			}
		}
	}
	for _, r := range systemRoutes() {
		item := objectAt(paths, r.path)
		item[strings.ToLower(r.method)] = part(r.operation(taken))
	}
	tags, _ := doc["tags"].([]any)
	if !slices.ContainsFunc(tags, func(t any) bool { m, _ := t.(map[string]any); return m["name"] == "system" }) {
		doc["tags"] = append(tags, part(docObj("name", "system",
			"description", "Routes of idem itself, not catalog operations: they carry no "+AgentRetryExtension+".")))
	}
	dropUnused(doc, used)
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	return append(out, '\n'), nil
}

// localRef is a reference to a component of the document.
var localRef = regexp.MustCompile(`"\$ref":"(#/components/[^"]+)"`)

// localRefs are the components doc references.
func localRefs(doc map[string]any) map[string]bool {
	raw, _ := json.Marshal(doc)
	out := map[string]bool{}
	for _, m := range localRef.FindAllSubmatch(raw, -1) {
		out[string(m[1])] = true
	}
	return out
}

// dropUnused deletes the components of base that were referenced (used)
// and no longer are: those only idem's changes used (a shared answer each
// operation now has a copy of, a key parameter idem reads itself), and in
// turn those only they used.
func dropUnused(doc map[string]any, used map[string]bool) {
	components := objectAt(doc, "components")
	for dropped := true; dropped; {
		dropped = false
		now := localRefs(doc)
		for _, kind := range slices.Sorted(maps.Keys(components)) {
			group, _ := components[kind].(map[string]any)
			for name := range group {
				if ref := "#/components/" + kind + "/" + name; used[ref] && !now[ref] {
					delete(group, name)
					dropped = true
				}
			}
			if dropped && len(group) == 0 {
				delete(components, kind)
			}
		}
	}
}

// describeRawOperation adds to op, base's operation of d, what idem
// serves on its route (see OpenAPIOver).
func describeRawOperation(doc, op map[string]any, d idem.Descriptor, part func(any) any) {
	keyed := d.Retry.Kind == idem.RetrySameKeyReplay
	op[AgentRetryExtension] = part(d.Retry)
	delete(op, "security") // the document's bearer requirement applies

	var params []any
	list, _ := op["parameters"].([]any)
	for _, p := range list {
		if !readByIdem(resolved(doc, p)) {
			params = append(params, p)
		}
	}
	for _, p := range controlParameters(d.Retry) {
		params = append(params, part(p))
	}
	if len(params) > 0 {
		op["parameters"] = params
	} else {
		delete(op, "parameters")
	}

	responses := objectAt(op, "responses")
	// Idem-Execution-Id is on every answer of the upstream and on idem's
	// problems once the execution exists; Idempotent-Replayed and
	// Preference-Applied on the upstream's answers of a keyed operation
	// (idem's own problems are never stored, so never replayed).
	headers := docObj(idem.HeaderExecutionID, docObj(
		"description", "The execution that produced this answer (GET /v1/executions/{id}): on every answer of the upstream, "+
			"and on a problem idem produced once the execution existed.",
		"schema", docObj("type", "string"),
	))
	addHeaders := func(r map[string]any, upstream bool) {
		h := objectAt(r, "headers")
		add := headers
		if keyed && upstream {
			add = append(slices.Clone(add), replayHeaders()...)
		}
		for _, m := range add {
			if !slices.ContainsFunc(slices.Collect(maps.Keys(h)), func(k string) bool { return strings.EqualFold(k, m.key) }) {
				h[m.key] = part(m.value)
			}
		}
	}
	for _, status := range slices.Sorted(maps.Keys(responses)) {
		// A shared answer ($ref) gets a copy of its own: the headers
		// differ by contract.
		r, ok := resolved(doc, responses[status]).(map[string]any)
		if !ok {
			continue
		}
		r = genericPart(r, nil, false).(map[string]any)
		addHeaders(r, true)
		responses[status] = r
	}
	byStatus := answeredProblems(d, op["requestBody"] != nil)
	for _, status := range slices.Sorted(maps.Keys(byStatus)) {
		key := strconv.Itoa(status)
		ours := part(problemsResponse(status, byStatus[status])).(map[string]any)
		theirs, ok := responses[key].(map[string]any)
		if !ok {
			if status != http.StatusUnauthorized {
				addHeaders(ours, false)
			}
			responses[key] = ours
			continue
		}
		if status == http.StatusUnauthorized {
			ours = part(unauthenticated()).(map[string]any)
		}
		desc, _ := theirs["description"].(string)
		theirDesc, _ := ours["description"].(string)
		theirs["description"] = strings.TrimSpace(desc + "\n\nOr a problem idem answers itself:\n" + theirDesc)
		content := objectAt(theirs, "content")
		if content[idem.ContentTypeProblem] == nil {
			content[idem.ContentTypeProblem] = objectAt(ours, "content")[idem.ContentTypeProblem]
		}
		h := objectAt(theirs, "headers")
		for name, v := range objectAt(ours, "headers") {
			if h[name] == nil {
				h[name] = v
			}
		}
	}
	if responses["default"] == nil {
		r := part(defaultProblemResponse()).(map[string]any)
		addHeaders(r, false)
		responses["default"] = r
	}
}

// readByIdem reports whether p is a header parameter idem reads itself
// and never forwards (Idempotency-Key, Prefer).
func readByIdem(p any) bool {
	m, _ := p.(map[string]any)
	name, _ := m["name"].(string)
	return m["in"] == "header" && (strings.EqualFold(name, idem.HeaderIdempotencyKey) || strings.EqualFold(name, "Prefer"))
}

// resolved is v, or the component a local $ref of v names.
func resolved(doc map[string]any, v any) any {
	m, _ := v.(map[string]any)
	ref, _ := m["$ref"].(string)
	rest, ok := strings.CutPrefix(ref, "#/components/")
	if !ok {
		return v
	}
	kind, name, _ := strings.Cut(rest, "/")
	if c := objectAt(objectAt(doc, "components"), kind)[name]; c != nil {
		return c
	}
	return v
}

// objectAt returns the object member key of m, adding an empty one when
// it is absent (or not an object).
func objectAt(m map[string]any, key string) map[string]any {
	if o, ok := m[key].(map[string]any); ok {
		return o
	}
	o := map[string]any{}
	m[key] = o
	return o
}

// genericPart is v as generic JSON (a fresh copy), its references to
// idem's components renamed, and in a 3.0 document its schemas in 3.0's
// terms.
func genericPart(v any, renames map[string]string, v30 bool) any {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("httpapi: render OpenAPI document: %v", err))
	}
	var out any
	_ = json.Unmarshal(raw, &out)
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok && renames[ref] != "" {
				v["$ref"] = renames[ref]
			}
			if v30 {
				if types, ok := v["type"].([]any); ok && len(types) == 2 && slices.Contains(types, any("null")) {
					v["type"] = types[slices.IndexFunc(types, func(t any) bool { return t != "null" })]
					v["nullable"] = true
				}
				if c, ok := v["const"]; ok {
					delete(v, "const")
					v["enum"] = []any{c}
				}
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(out)
	return out
}

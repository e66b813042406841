package proxy_test

// Regression tests of defects found in review, each with what went wrong
// and how it was fixed (the comment on each says "Fix:").

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// TestReplayOfACompressedAnswer: the Forwarder passes the caller's
// Accept-Encoding on, so net/http does not decompress and the upstream's
// gzip body is the answer, with Content-Encoding: gzip. The store keeps
// only Content-Type, Location and ETag (idem.ReplayedHeaders), so the
// replay is the gzip bytes without Content-Encoding: a client cannot read
// it. Python's requests and most HTTP clients send Accept-Encoding: gzip
// by default.
//
// Fix: delete Accept-Encoding from the forwarded headers (forward.go,
// hopByHop or next to it), so that the transport negotiates gzip itself
// and hands back the decoded body; or keep Content-Encoding with the
// stored headers of raw operations.
func TestReplayOfACompressedAnswer(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body := []byte(`{"id":"t1"}`)
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			var b bytes.Buffer
			z := gzip.NewWriter(&b)
			_, _ = z.Write(body)
			_ = z.Close()
			body = b.Bytes()
			w.Header().Set("Content-Encoding", "gzip")
		}
		w.WriteHeader(201)
		_, _ = w.Write(body)
	})
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	built, err := proxy.Build(loadDoc(t, keyedDoc), nil, proxy.Options{Forward: f.Handler})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, built.Operations)
	call := func() idem.Result {
		return r.Call(t.Context(), idem.Invocation{
			Operation: "createThing",
			Surface:   idem.SurfaceHTTP,
			Principal: agent,
			Key:       "gz-1",
			Intent:    idem.Intent{Body: []byte(`{"name":"a"}`), ContentType: "application/json", Passthrough: http.Header{"Accept-Encoding": {"gzip, deflate"}, "Content-Type": {"application/json"}}},
		})
	}
	// readable decodes an answer as a client would: by its own headers.
	readable := func(res idem.Result) string {
		body := res.Body()
		if res.Header.Get("Content-Encoding") == "gzip" {
			z, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				return "unreadable: " + err.Error()
			}
			b, err := io.ReadAll(z)
			if err != nil {
				return "unreadable: " + err.Error()
			}
			body = b
		}
		return string(body)
	}
	first := call()
	if got := readable(first); first.Status != 201 || got != `{"id":"t1"}` {
		t.Fatalf("first answer %d %q", first.Status, got)
	}
	again := call()
	if !again.Replayed {
		t.Fatalf("no replay: %d %s", again.Status, again.Body())
	}
	if got := readable(again); got != `{"id":"t1"}` {
		t.Fatalf("the replay reads %q (headers %v): the client cannot decode it", got, again.Header)
	}
}

// TestDotSegmentPathParameters: Forwarder.forward joins the concrete path
// with url.URL.JoinPath, which cleans it (path.Join): a path parameter
// "..", "." or "" (which the MCP surface and the Go API pass as they are;
// idem.FillPath leaves dots unescaped) moves the call to another upstream
// route than the operation's. The contract, the policies and the
// approval were those of deleteMember; the upstream receives DELETE
// /members/m1, or DELETE /orgs/members/m1.
//
// Fix: refuse ".", ".." and "" as path parameter values at input
// validation (pipeline_input.go, for every operation: an HTTP router
// never yields them), and in forward.go append the escaped path to the
// upstream's without cleaning (target.Path = base.Path + req.Path with
// RawPath from base.EscapedPath() + the escaped req.Path).
func TestDotSegmentPathParameters(t *testing.T) {
	up := newUpstream(t, nil)
	f := &proxy.Forwarder{Upstream: mustURL(t, up.URL), Client: proxy.NewClient()}
	built, err := proxy.Build(loadDoc(t, doc30(`  /orgs/{org}/members/{member}:
    delete:
      operationId: deleteMember
      parameters:
        - {name: org, in: path, required: true, schema: {type: string}}
        - {name: member, in: path, required: true, schema: {type: string}}
      responses: {'204': {description: ok}}
`)), nil, proxy.Options{Forward: f.Handler})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, built.Operations)
	for _, org := range []string{"..", ".", ""} {
		t.Run("org="+org, func(t *testing.T) {
			before := up.count.Load()
			res := r.Call(t.Context(), idem.Invocation{
				Operation: "deleteMember",
				Surface:   idem.SurfaceMCP,
				Principal: agent,
				Intent:    idem.Intent{PathParams: map[string]string{"org": org, "member": "m1"}},
			})
			if up.count.Load() == before {
				if res.Status != 400 {
					t.Fatalf("refused with %d %s, want 400 INVALID_INPUT", res.Status, res.Body())
				}
				return // refused at validation: fine
			}
			got := up.last(t)
			if !strings.HasPrefix(got.uri, "/orgs/") || !strings.HasSuffix(got.uri, "/members/m1") || strings.Count(got.uri, "/") != 4 {
				t.Fatalf("deleteMember with org %q reached the upstream as DELETE %s", org, got.uri)
			}
		})
	}
}

// TestReadOnlyRequiredPropertyOfARequestBody: in OpenAPI 3.0, "if the
// property is marked as readOnly being true and is in the required list,
// the required will take effect on the response only". One schema serves
// as the request and the response body (an id the server assigns);
// Build copies its required list into the flat input schema, so every
// valid create is refused with INVALID_INPUT (and the caller cannot send
// the id either: the server owns it).
//
// Fix: in inputOf (operations.go), leave out of required the body
// properties whose schema is readOnly (after resolving a $ref), and do the
// same inside $defs for the request side (or drop "required" entries whose
// property is readOnly when converting for input); in 3.1 the same
// annotation means the same.
func TestReadOnlyRequiredPropertyOfARequestBody(t *testing.T) {
	r, _, rec := buildRunner(t, loadDoc(t, `openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /accounts:
    post:
      operationId: createAccount
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: '#/components/schemas/Account'}
      responses:
        '201':
          description: ok
          content:
            application/json:
              schema: {$ref: '#/components/schemas/Account'}
components:
  schemas:
    Account:
      type: object
      required: [id, name]
      properties:
        id: {type: string, readOnly: true}
        name: {type: string}
`), nil)
	res := r.Call(t.Context(), idem.Invocation{Operation: "createAccount", Principal: agent, Intent: idem.Intent{Body: []byte(`{"name":"a"}`)}})
	if res.Status != 200 || len(rec.calls("createAccount")) != 1 {
		t.Fatalf("a valid create was answered %d %s", res.Status, res.Body())
	}
}

// TestBuildLeavesItsDocumentAlone: Build writes x-idem-agent-retry into
// the document it is given (doc.T's operations), so a second Build of the
// same Document (a reload, a test, a check before serving) reads every
// contract as declared by the extension: the method defaults and the
// overlay are never consulted again, and the start-up warning about
// undeclared writes disappears.
//
// Fix: in Build, marshal the served document from a copy (marshal doc.T,
// unmarshal into a fresh openapi3.T, or set the extension on a copy of
// each Operation), leaving doc untouched.
func TestBuildLeavesItsDocumentAlone(t *testing.T) {
	doc := loadDoc(t, contractsDoc)
	overlay, err := proxy.ParseOverlay([]byte(contractsOverlay))
	if err != nil {
		t.Fatal(err)
	}
	first, err := proxy.Build(doc, overlay, proxy.Options{Forward: noForward})
	if err != nil {
		t.Fatal(err)
	}
	second, err := proxy.Build(doc, overlay, proxy.Options{Forward: noForward})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range first.Proxied {
		if q := second.Proxied[i]; p.Contract != q.Contract {
			t.Errorf("%s: contract from %q, then from %q", p.Name, p.Contract, q.Contract)
		}
	}
	if len(first.Warnings) != len(second.Warnings) {
		t.Errorf("warnings %q, then %q", first.Warnings, second.Warnings)
	}
}

// TestCallerXIdempotencyKeyMakesAWriteReplayable: the Forwarder sets the
// handler key under a lower-case name so that net/http does not treat a
// write as replayable and resend it by itself when a reused connection
// breaks (forward.go). But the caller's own X-Idempotency-Key is
// forwarded, and net/http treats it the same way
// (Request.isReplayable): a bodiless write (DELETE, a POST without body)
// whose reused connection breaks after the upstream read it is sent a
// second time, by the transport, within one attempt.
//
// Fix: remove X-Idempotency-Key from the forwarded headers too (it is
// idem's business, like Idempotency-Key), or give every write a
// non-nil, non-rewindable body (e.g. io.NopCloser(bytes.NewReader(nil))
// with ContentLength 0 for an empty one), which makes it never replayable
// whatever its headers.
func TestCallerXIdempotencyKeyMakesAWriteReplayable(t *testing.T) {
	var n atomic.Int64
	s := hijacker(t, &n)
	client := proxy.NewClient()
	warm, err := client.Get(s.URL + "/warm")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, warm.Body)
	warm.Body.Close()
	f := &proxy.Forwarder{Upstream: mustURL(t, s.URL), Client: client}
	_, err = f.Handler(proxy.Operation{Method: "DELETE", Writes: true})(t.Context(), &idem.Call{IdempotencyKey: "ik_1"},
		idem.RawRequest{Method: "DELETE", Path: "/things/1", Header: http.Header{"X-Idempotency-Key": {"caller-9"}}})
	if err == nil {
		t.Fatal("no error from a closed connection")
	}
	if n.Load() != 1 {
		t.Fatalf("the upstream got the DELETE %d times", n.Load())
	}
}

// TestNullableWithoutType: OpenAPI 3.0's usual way to make a reference
// nullable is nullable: true beside an allOf (a $ref takes no siblings
// in 3.0). toJSONSchema adds "null" only to a "type" it finds, so the
// converted schema refuses the null the document allows.
//
// Fix: in toJSONSchema (schema.go), when nullable is true and there is no
// type, wrap the converted schema: {"anyOf": [<it>, {"type": "null"}]}.
func TestNullableWithoutType(t *testing.T) {
	r, _, rec := buildRunner(t, loadDoc(t, `openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /things:
    post:
      operationId: createThing
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                owner:
                  nullable: true
                  allOf:
                    - $ref: '#/components/schemas/User'
      responses: {'201': {description: ok}}
components:
  schemas:
    User:
      type: object
      required: [id]
      properties:
        id: {type: string}
`), nil)
	for _, body := range []string{`{"owner":{"id":"u1"}}`, `{"owner":null}`} {
		res := r.Call(t.Context(), idem.Invocation{Operation: "createThing", Principal: agent, Intent: idem.Intent{Body: []byte(body)}})
		if res.Status != 200 {
			t.Errorf("%s was answered %d %s", body, res.Status, res.Body())
		}
	}
	if n := len(rec.calls("createThing")); n != 2 {
		t.Fatalf("%d calls reached the upstream, want 2", n)
	}
}

// TestInputSchemaCarriesOnlyItsReferences: every operation's input and
// output schema embeds every component schema of the document under
// $defs, whether it refers to it or not. The catalog, the MCP tool list
// and the compile time at registration grow as operations × components:
// measured on a generated 3.0 document (n operations, each a POST whose
// body is its own 10-property component, n components), Build then
// idem.NewRegistry took 0.2 s + 1.4 s and made 2.1 MB of schemas at
// n=50, 1.7 s + 19 s and 33 MB at n=200, 8.9 s + 56 s and 130 MB at n=400
// (a 418 KB document). Public APIs have 500–1000 operations and as many
// components.
//
// Fix: in inputOf and outputOf (operations.go), set $defs to the
// components reachable from the operation's own schemas (the transitive
// closure of their "#/$defs/…" references), not to all of them.
func TestInputSchemaCarriesOnlyItsReferences(t *testing.T) {
	r, _, _ := buildRunner(t, loadFile(t, "testdata/shop30.yaml"), nil)
	d, _ := r.Describe("listWidgets")
	if strings.Contains(string(d.InputSchema), "NewWidget") || strings.Contains(string(d.InputSchema), "$defs") {
		t.Errorf("listWidgets refers to no component, its input schema embeds them: %s", d.InputSchema)
	}
	if strings.Contains(string(d.OutputSchema), "NewWidget") {
		t.Errorf("listWidgets' output refers to Widget only, its schema embeds NewWidget: %s", d.OutputSchema)
	}
	c, _ := r.Describe("createWidget")
	if strings.Contains(string(c.InputSchema), `"Widget"`) {
		t.Errorf("createWidget's input refers to NewWidget and Size, its schema embeds Widget: %s", c.InputSchema)
	}
}

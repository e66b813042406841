package canonical

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// req builds a Request from a method, a path with an optional raw query, and
// a body.
func req(t *testing.T, method, target, body string) Request {
	t.Helper()
	path, rawQuery, _ := strings.Cut(target, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		t.Fatalf("bad query %q: %v", rawQuery, err)
	}
	r := Request{Method: method, Path: path, Query: q}
	if body != "" {
		r.Body = []byte(body)
	}
	return r
}

func TestFingerprintCompares(t *testing.T) {
	const path = "/v1/orders/ord_1/refund"
	tests := []struct {
		name string
		a, b Request
		same bool
	}{
		{"member order and whitespace", req(t, "POST", path, `{"b":1,"a":2}`), req(t, "POST", path, `{ "a":2, "b":1 }`), true},
		{"array order", req(t, "POST", path, `[1,2]`), req(t, "POST", path, `[2,1]`), false},
		{"number forms 1.0 and 1", req(t, "POST", path, `{"amount":1.0}`), req(t, "POST", path, `{"amount":1}`), true},
		{"number forms 1e2 and 100", req(t, "POST", path, `[1e2]`), req(t, "POST", path, `[100]`), true},
		{"string escapes", req(t, "POST", path, `"\u00e9\/"`), req(t, "POST", path, `"é/"`), true},
		{"different values", req(t, "POST", path, `{"amount":1}`), req(t, "POST", path, `{"amount":2}`), false},
		{"number and string", req(t, "POST", path, `{"amount":1}`), req(t, "POST", path, `{"amount":"1"}`), false},
		{"query value differs", req(t, "POST", path+"?environment=preview", ""), req(t, "POST", path+"?environment=production", ""), false},
		{"query names reordered", req(t, "POST", path+"?b=1&a=2", ""), req(t, "POST", path+"?a=2&b=1", ""), true},
		{"repeated values reordered", req(t, "POST", path+"?a=1&a=2", ""), req(t, "POST", path+"?a=2&a=1", ""), false},
		{"repeated values interleaved", req(t, "POST", path+"?a=1&b=3&a=2", ""), req(t, "POST", path+"?b=3&a=1&a=2", ""), true},
		// dryRun is the caller's to remove once parsed (SPEC §6.2): a
		// parameter nobody interpreted never vanishes from the intent.
		{"dryRun is hashed like any parameter", req(t, "POST", path+"?x=1", `{}`), req(t, "POST", path+"?x=1&dryRun=true", `{}`), false},
		{"dryRun false is hashed", req(t, "POST", path+"?dryRun=false", `{}`), req(t, "POST", path, `{}`), false},
		{"dryRun of another spelling is hashed", req(t, "POST", path+"?dryRun=1", ""), req(t, "POST", path, ""), false},
		{"dryRun repeated is hashed", req(t, "POST", path+"?dryRun=false&dryRun=true", ""), req(t, "POST", path, ""), false},
		{"dryrun is another parameter", req(t, "POST", path+"?dryrun=true", ""), req(t, "POST", path, ""), false},
		{"query percent-encoding", req(t, "POST", path+"?q=a%20b", ""), req(t, "POST", path+"?q=a+b", ""), true},
		{"empty query value", req(t, "POST", path+"?a", ""), req(t, "POST", path+"?a=", ""), true},
		{"empty query value and no parameter", req(t, "POST", path+"?a=", ""), req(t, "POST", path, ""), false},
		{"method case", req(t, "post", path, `{}`), req(t, "POST", path, `{}`), true},
		{"method mixed case", req(t, "pAtCh", path, `{}`), req(t, "PATCH", path, `{}`), true},
		{"different method", req(t, "PUT", path, `{}`), req(t, "POST", path, `{}`), false},
		{"different path", req(t, "POST", "/v1/orders/ord_1/refund", `{}`), req(t, "POST", "/v1/orders/ord_2/refund", `{}`), false},
		{"trailing slash", req(t, "POST", path, `{}`), req(t, "POST", path+"/", `{}`), false},
		{"empty and absent body", Request{Method: "POST", Path: path, Body: []byte{}}, Request{Method: "POST", Path: path}, true},
		{"null body and no body", req(t, "POST", path, `null`), req(t, "POST", path, ""), false},
		{"empty object and no body", req(t, "POST", path, `{}`), req(t, "POST", path, ""), false},
		{"nil and empty query", Request{Method: "GET", Path: path}, Request{Method: "GET", Path: path, Query: url.Values{}}, true},
		{"name without values", Request{Method: "GET", Path: path, Query: url.Values{"a": nil}}, Request{Method: "GET", Path: path}, true},
		// Field boundaries cannot be moved: each case shifts bytes between fields.
		{"path and query boundary", Request{Method: "GET", Path: "/a", Query: url.Values{"b": {"c"}}}, Request{Method: "GET", Path: "/ab", Query: url.Values{"": {"c"}}}, false},
		{"name and value boundary", Request{Method: "GET", Path: "/", Query: url.Values{"ab": {"c"}}}, Request{Method: "GET", Path: "/", Query: url.Values{"a": {"bc"}}}, false},
		{"values and names", Request{Method: "GET", Path: "/", Query: url.Values{"a": {"1", "2"}}}, Request{Method: "GET", Path: "/", Query: url.Values{"a": {"1"}, "2": {}}}, false},
		{"method and path boundary", Request{Method: "GE", Path: "T/"}, Request{Method: "GET", Path: "/"}, false},
		{"query value mimicking a body", Request{Method: "GET", Path: "/", Query: url.Values{"a": {"4:json,2:{},"}}}, Request{Method: "GET", Path: "/", Query: url.Values{"a": {""}}, Body: []byte(`{}`)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fa, err := Fingerprint(tt.a)
			if err != nil {
				t.Fatalf("Fingerprint(a): %v", err)
			}
			fb, err := Fingerprint(tt.b)
			if err != nil {
				t.Fatalf("Fingerprint(b): %v", err)
			}
			if (fa == fb) != tt.same {
				t.Errorf("same = %v, want %v\na: %+v -> %s\nb: %+v -> %s", fa == fb, tt.same, tt.a, fa, tt.b, fb)
			}
		})
	}
}

// TestFingerprintGolden pins the encoding: changing it would make every
// stored fingerprint disagree with new requests and break other languages'
// implementations. The same request is the example in the package doc.
func TestFingerprintGolden(t *testing.T) {
	r := req(t, "post", "/v1/orders/ord_1/refund?reason=duplicate&amount=10.00&reason=late",
		`{ "currency": "EUR", "amount": 10.0 }`)
	const wantPreimage = `19:idem-fingerprint-v1,4:POST,23:/v1/orders/ord_1/refund,1:3,` +
		`6:amount,5:10.00,6:reason,9:duplicate,6:reason,4:late,` +
		`4:json,30:{"amount":10,"currency":"EUR"},`
	const want = "c96840512f81601bfa8f9f4777d562145d9d9573099dcb473422c7b8106df608"
	pre, err := preimage(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(pre) != wantPreimage {
		t.Errorf("preimage\n got %s\nwant %s", pre, wantPreimage)
	}
	got, err := Fingerprint(r)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("Fingerprint = %s, want %s", got, want)
	}

	noBody := Request{Method: "GET", Path: "/v1/orders"}
	const wantNoBody = `19:idem-fingerprint-v1,3:GET,10:/v1/orders,1:0,6:nobody,`
	if pre, _ := preimage(noBody); string(pre) != wantNoBody {
		t.Errorf("preimage without body\n got %s\nwant %s", pre, wantNoBody)
	}
	if got, _ := Fingerprint(noBody); got != "b644d60bf37d4e7fdb487965ae35ecbbb3535c4721bf23f2d20825b93aaaf418" {
		t.Errorf("Fingerprint without body = %s", got)
	}
}

// A body given as Canonical is hashed as it is: the canonical form of a
// body has the body's fingerprint.
func TestFingerprintCanonicalBody(t *testing.T) {
	body := []byte(`{ "currency": "EUR", "amount": 10.0 }`)
	canon, err := TransformStrict(body)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Fingerprint(Request{Method: "POST", Path: "/v1/x", Body: body})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Fingerprint(Request{Method: "POST", Path: "/v1/x", Body: canon, Canonical: true})
	if err != nil || got != want {
		t.Fatalf("Fingerprint(canonical) = %s, %v; want %s", got, err, want)
	}
	// Not transformed again: other bytes are another fingerprint.
	if other, _ := Fingerprint(Request{Method: "POST", Path: "/v1/x", Body: body, Canonical: true}); other == want {
		t.Fatal("a Canonical body was transformed")
	}
}

func TestFingerprintFormat(t *testing.T) {
	got, err := Fingerprint(Request{})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(got) {
		t.Errorf("Fingerprint = %q, want 64 lower-case hex digits", got)
	}
}

func TestFingerprintRejectsInvalidBody(t *testing.T) {
	tests := []struct {
		name, body, msg string
	}{
		{"not JSON", `amount=1`, "fingerprint body: canonical: unexpected character 'a' where a value was expected at offset 0"},
		{"duplicate key", `{"a":1,"a":2}`, `fingerprint body: canonical: duplicate key "a" at offset 7`},
		{"trailing data", `{}{}`, "unexpected data after the JSON value"},
		{"whitespace only", "  ", "unexpected end of input"},
		{"invalid UTF-8", "\"\xff\"", "invalid UTF-8"},
		{"number overflow", `[1e999]`, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Fingerprint(Request{Method: "POST", Path: "/v1/x", Body: []byte(tt.body)})
			if err == nil {
				t.Fatalf("Fingerprint = %s, want an error", got)
			}
			if got != "" {
				t.Errorf("Fingerprint returned %q with its error", got)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Errorf("error %v does not wrap a *SyntaxError", err)
			}
		})
	}
}

func TestFingerprintDoesNotModifyRequest(t *testing.T) {
	q := url.Values{"b": {"2", "1"}, "a": {"x"}, "dryRun": {"true"}}
	r := Request{Method: "post", Path: "/p", Query: q, Body: []byte(`{"b":1,"a":2}`)}
	if _, err := Fingerprint(r); err != nil {
		t.Fatal(err)
	}
	if r.Method != "post" || q.Encode() != "a=x&b=2&b=1&dryRun=true" || string(r.Body) != `{"b":1,"a":2}` {
		t.Errorf("request changed: %+v", r)
	}
}

// TestFingerprintHeaderInputs: header inputs follow the query in the
// preimage, names lower-cased and sorted; without them (nil or empty) the
// preimage is the one it always was.
func TestFingerprintHeaderInputs(t *testing.T) {
	base := Request{Method: "POST", Path: "/v1/notes", Body: []byte(`{"text":"hi"}`)}
	plain, _ := Fingerprint(base)
	empty := base
	empty.Header = map[string][]string{"X-Tenant": {}}
	if got, _ := Fingerprint(empty); got != plain {
		t.Errorf("an empty header set changed the fingerprint")
	}
	with := base
	with.Header = map[string][]string{"X-Tenant": {"acme"}, "X-Priority": {"2"}}
	const wantPreimage = `19:idem-fingerprint-v1,4:POST,9:/v1/notes,1:0,7:headers,1:2,10:x-priority,1:2,8:x-tenant,4:acme,4:json,13:{"text":"hi"},`
	if pre, _ := preimage(with); string(pre) != wantPreimage {
		t.Errorf("preimage\n got %s\nwant %s", pre, wantPreimage)
	}
	a, _ := Fingerprint(with)
	lower := base
	lower.Header = map[string][]string{"x-tenant": {"acme"}, "x-PRIORITY": {"2"}}
	if b, _ := Fingerprint(lower); b != a {
		t.Errorf("header names are case-insensitive: %s != %s", b, a)
	}
	other := base
	other.Header = map[string][]string{"X-Tenant": {"globex"}, "X-Priority": {"2"}}
	if b, _ := Fingerprint(other); b == a || a == plain {
		t.Errorf("another header value must be another intent")
	}
	// A header is not a query parameter of the same name and value.
	query := base
	query.Query = map[string][]string{"x-tenant": {"acme"}, "x-priority": {"2"}}
	if b, _ := Fingerprint(query); b == a {
		t.Errorf("a header and a query parameter collide")
	}
}

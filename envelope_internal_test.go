package idem

import (
	"encoding/json"
	"reflect"
	"testing"
)

// marshalEnvelope writes what encoding/json writes, field by field: a
// field added to Meta must be added there too.
func TestMarshalEnvelopeFields(t *testing.T) {
	if n := reflect.TypeFor[Meta]().NumField(); n != 5 {
		t.Fatalf("Meta has %d fields: teach Meta.appendJSON and Meta.plain the new one, then this test", n)
	}
	if n := reflect.TypeFor[IdempotencyMeta]().NumField(); n != 2 {
		t.Fatalf("IdempotencyMeta has %d fields: teach Meta.appendJSON and Meta.plain the new one, then this test", n)
	}
	if n := reflect.TypeFor[Envelope]().NumField(); n != 2 {
		t.Fatalf("Envelope has %d fields: teach marshalEnvelope the new one, then this test", n)
	}
}

func TestMarshalEnvelope(t *testing.T) {
	metas := []*Meta{
		nil, {},
		{Operation: "business.create", ExecutionID: "exe_01abc", Attempts: 1, Idempotency: &IdempotencyMeta{Key: "k-1:/+=@~."}},
		{Operation: "x", Attempts: 3, DryRun: true},
		{ExecutionID: "exe_1", Idempotency: &IdempotencyMeta{Key: "k", Replayed: true}},
		{Attempts: -1},
		{Operation: "a<b"}, {ExecutionID: "\"q\""}, {Idempotency: &IdempotencyMeta{Key: "é"}}, {Operation: "a\\b"},
	}
	datas := []string{`{"a":1}`, `[1,2]`, `"s"`, `null`, `1.5e3`, `{"a":"<&>"}`, `{"a":"\u2028"}`, "{\"a\":\"\u2028\"}", `{ "a": 1 }`, `{"a":"x y"}`,
		`{"a":"\" }"}`, `{"a":"\\"}`, `{"a":`, `{"a":1}x`, `nul`, `{"a":"é"}`, "{\"a\":\"\xff\"}", ``, "\t{}"}
	for _, m := range metas {
		for _, d := range append(datas, "\x00nil") {
			var data json.RawMessage
			if d != "\x00nil" {
				data = json.RawMessage(d)
			}
			want, wantErr := json.Marshal(Envelope{Data: data, Meta: m})
			got, err := marshalEnvelope(data, m)
			if string(got) != string(want) || (err == nil) != (wantErr == nil) {
				t.Errorf("marshalEnvelope(%q, %+v) = %s, %v; encoding/json writes %s, %v", d, m, got, err, want, wantErr)
			}
		}
	}
}

func FuzzMarshalEnvelope(f *testing.F) {
	f.Add([]byte(`{"a":[1,"<"]}`), "business.create", "exe_1", "k", 1, false, true)
	f.Add([]byte(` {"b" : "\u2028"} `), "o", "", "", 0, true, false)
	f.Fuzz(func(t *testing.T, data []byte, op, id, key string, attempts int, dryRun, keyed bool) {
		m := &Meta{Operation: op, ExecutionID: id, Attempts: attempts, DryRun: dryRun}
		if keyed {
			m.Idempotency = &IdempotencyMeta{Key: key, Replayed: attempts%2 == 0}
		}
		want, wantErr := json.Marshal(Envelope{Data: data, Meta: m})
		got, err := marshalEnvelope(data, m)
		if string(got) != string(want) || (err == nil) != (wantErr == nil) {
			t.Fatalf("marshalEnvelope(%q, %+v) = %s, %v; encoding/json writes %s, %v", data, m, got, err, want, wantErr)
		}
	})
}

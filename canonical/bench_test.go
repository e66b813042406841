package canonical

import (
	"net/url"
	"testing"
)

// benchBody is a typical ~1 KiB request body as a client sends it: members in
// no particular order, some whitespace, nested objects and arrays, a few
// non-ASCII strings and numbers that need normalizing.
const benchBody = `{
  "orderId": "ord_01HZX3K9Q7YF2T5M8N4B6C1D0E",
  "reason": "customer_request",
  "amount": {"value": 1999.00, "currency": "EUR"},
  "items": [
    {"sku": "TSHIRT-BLK-M", "quantity": 2, "unitPrice": 499.5, "description": "T-shirt, black, M"},
    {"sku": "MUG-WHT", "quantity": 1, "unitPrice": 1000, "description": "Mug \u2014 white"},
    {"sku": "STICKER-PACK", "quantity": 10, "unitPrice": 0.0, "description": "Sticker pack (free)"}
  ],
  "customer": {
    "id": "cus_8f2a1c", "email": "jürgen.müller@example.com", "name": "Jürgen Müller",
    "address": {"line1": "Hauptstraße 5", "city": "München", "postalCode": "80331", "country": "DE"}
  },
  "notify": true,
  "refundShipping": false,
  "parentRefund": null,
  "metadata": {
    "source": "agent", "agentRun": "run_7d1e9b", "ticket": "SUP-48213",
    "tags": ["duplicate-charge", "priority", "eu"], "score": 0.8750,
    "createdAt": "2025-11-30T02:25:00Z", "note": "Customer was charged twice 😀 — refund one."
  },
  "idempotencyHint": "refund-ord_01HZX3K9Q7YF2T5M8N4B6C1D0E-1"
}`

func BenchmarkTransform(b *testing.B) {
	data := []byte(benchBody)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Transform(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	r := Request{
		Method: "POST",
		Path:   "/v1/orders/ord_01HZX3K9Q7YF2T5M8N4B6C1D0E/refund",
		Query:  url.Values{"environment": {"production"}, "dryRun": {"false"}},
		Body:   []byte(benchBody),
	}
	b.SetBytes(int64(len(r.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Fingerprint(r); err != nil {
			b.Fatal(err)
		}
	}
}

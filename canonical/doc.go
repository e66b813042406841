// Package canonical writes JSON in its RFC 8785 canonical form and computes
// the request fingerprint that idem compares when an idempotency key is used
// again (SPEC §6.2).
//
// # Canonical JSON
//
// [Transform] parses exactly one JSON value (RFC 8259), strictly and as I-JSON
// (RFC 7493), and writes it in the JSON Canonicalization Scheme (RFC 8785):
//
//   - no whitespace;
//   - object members sorted by the UTF-16 code units of their names, so that
//     a name with a character above U+FFFF sorts before one with U+E000–U+FFFF;
//     arrays keep their order;
//   - strings with the minimal escapes of RFC 8785 §3.2.2.2: \" and \\,
//     \b \t \n \f \r, \u00xx (lower-case hex) for the other controls below
//     U+0020, and every other character, U+2028 and U+2029 included, as
//     literal UTF-8;
//   - numbers as ECMAScript's Number.prototype.toString prints the nearest
//     IEEE-754 double: 1.0 → 1, -0 → 0, 1e21 → 1e+21, 0.000001, 1e-7.
//
// Input is refused, never repaired: invalid UTF-8, escapes that leave a lone
// surrogate, duplicate member names (compared after unescaping), numbers too
// large for a double, data after the value and nesting deeper than
// [MaxDepth] are errors of type [*SyntaxError], which give the byte offset
// and the JSON Pointer of the value. Numbers too small for a double become 0,
// as in ECMAScript. Unicode noncharacters are kept, and no Unicode
// normalization is applied.
//
// # What the canonical form holds
//
// A number is its nearest IEEE-754 double: 5, 5.0, 5e0 and 50e-1 are one
// value, written 5, and so are 0.1 and 0.10000000000000000001. Up to
// [MaxExactInteger] (2^53−1) in magnitude every integer is a double, so a
// number that JSON Schema calls an integer keeps its value; beyond it
// 9007199254740993 and 9007199254740992 have one form. [TransformStrict],
// which idem applies to every input (SPEC §6.2), refuses every number
// beyond ±MaxExactInteger (1e400 included) and every string or member name
// with U+0000, which PostgreSQL cannot store; what it accepts, it writes as
// Transform does, so the fingerprint and a reader of the canonical form see
// one value. [CheckString] is the same rule for text outside a JSON document,
// and [PointerAt] names the value at a byte offset (where encoding/json
// reports a value it could not decode).
//
// # Request fingerprint
//
// [Fingerprint] is the lower-case hex SHA-256 of a preimage built from
// netstrings. A field N(s) is the length of s in bytes in ASCII decimal, ':',
// the bytes of s, and ','; for example N("POST") is "4:POST,". The preimage is
// the concatenation of:
//
//	N("idem-fingerprint-v1")
//	N("target") N(target)     only when the request names one (Request.Target)
//	N(method)                 ASCII a–z upper-cased, all other bytes kept
//	N(path)                   the concrete path, byte for byte
//	N(count)                  the number of query pairs that follow, in decimal
//	N(name) N(value)          once per query pair: names in byte-wise ascending
//	                          order, each name's values in the order given
//	N("headers") N(count)     only when the request has header inputs
//	                          (Request.Header): the number of pairs, then
//	N(name) N(value)          once per header pair: names ASCII lower-cased, in
//	                          byte-wise ascending order, values in the order given
//	N("nobody")               when the body is empty or absent, otherwise
//	N("json") N(body)         with body in canonical form (Transform; as given
//	                          when Request.Canonical says it is already), or
//	N("bytes") N(type) N(body) for a body of another media type (Request.Opaque), as sent
//
// Without a target the preimage is what it was before targets existed,
// and N("target") is never a method's field, which is upper-cased.
// Without header inputs the preimage is exactly what it was before they
// existed; with them, N("headers") stands where a body marker would, so the
// two can never collide. Header inputs are only the headers that the
// operation declares as arguments (in:"header"), never the others.
//
// # Versions
//
// The preimage above is version 2 ([FingerprintVersion]); version 1, what
// idem built before targets existed, is the same without N("target")
// N(target). Both open with N("idem-fingerprint-v1"), and a request
// without a target has the same preimage under both; one with a target
// never has a version-2 preimage equal to any version-1 preimage, since
// N("target") stands where a method would and a method is upper-cased.
// idem stores the version with each record it makes (a record stored
// without one was made under version 1 or 2), and judges a retry by its
// record's version ([FingerprintAt]), so that records made before an
// upgrade that changed the preimage keep replaying (SPEC §6.2). A change
// to the preimage is a new version: it must never change what an existing
// version hashes.
//
// The query is the request's without the control parameter dryRun (SPEC
// §6.2): the caller removes it once it has parsed it as exactly "true" or
// "false", given once; Fingerprint hashes every parameter it is given.
// Query names and values are the decoded strings of [net/url.Values], so
// "a%20b" and "a+b" are the same value; a parameter given without "=" has the
// empty value. A body of JSON null is a body, distinct from no body; a body of
// only whitespace is invalid JSON.
//
// For example, POST /v1/orders/ord_1/refund?reason=duplicate&amount=10.00&reason=late
// with the body { "currency": "EUR", "amount": 10.0 } has the preimage
//
//	19:idem-fingerprint-v1,4:POST,23:/v1/orders/ord_1/refund,1:3,6:amount,5:10.00,6:reason,9:duplicate,6:reason,4:late,4:json,30:{"amount":10,"currency":"EUR"},
//
// and the fingerprint c96840512f81601bfa8f9f4777d562145d9d9573099dcb473422c7b8106df608.
package canonical

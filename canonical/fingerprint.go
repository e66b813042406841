package canonical

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strconv"
)

// Request is what identifies one semantic request.
type Request struct {
	Method string     // e.g. "POST"; compared case-insensitively (ASCII)
	Path   string     // concrete path after template substitution, e.g. "/v1/orders/ord_1/refund"
	Query  url.Values // decoded query, without control parameters (see below)
	Body   []byte     // raw JSON body; empty or nil means no body
	// Opaque names the media type of a body that is not JSON (a proxied
	// upload, a form): its bytes are hashed as they are, with the type.
	// Empty means the body is JSON.
	Opaque string
	// Canonical says that Body, JSON, is already in canonical form (the
	// output of Transform or TransformStrict), so Fingerprint hashes it as
	// it is instead of transforming it again. Bytes in another form give
	// another fingerprint than Transform's would.
	Canonical bool
	// Header holds the request's header inputs: only the headers that the
	// operation declares as arguments, never the others. Names are
	// compared case-insensitively (ASCII); each name's values keep their
	// order. Empty adds nothing to the preimage, so a request without
	// header inputs has the fingerprint it always had.
	Header map[string][]string
	// Target names what the request is sent to when the operation's
	// identity alone does not (idem proxy: its upstream), so that one
	// route in front of two targets is two intents. Empty adds nothing to
	// the preimage.
	Target string
}

// preimageTag opens every preimage, so that a future encoding can never
// collide with this one. Versions 1 and 2 share it (see FingerprintVersion).
const preimageTag = "idem-fingerprint-v1"

// FingerprintVersion is the version of the preimage Fingerprint builds,
// which idem keeps with every record it makes, so that a retry is judged
// by the version its record was made with (SPEC §6.2). Version 2 added
// the target (Request.Target); version 1, before it, leaves the target
// out. A request without a target has one preimage under both.
const FingerprintVersion = 2

// FingerprintAt is Fingerprint under preimage version v (1 or 2, see
// FingerprintVersion): the fingerprint a record made under v holds for
// the same request.
func FingerprintAt(r Request, v int) (string, error) {
	switch v {
	case 1:
		r.Target = ""
	case FingerprintVersion:
	default:
		return "", fmt.Errorf("fingerprint: no preimage version %d", v)
	}
	return Fingerprint(r)
}

// Fingerprint returns the lower-case hex SHA-256 that identifies r's
// semantic request; the package documentation gives the exact encoding.
// Requests that differ only in method case, JSON formatting, member order,
// number spelling or query parameter order get the same fingerprint. Every
// query parameter given is hashed: the caller leaves out the control
// parameter dryRun once it has parsed it (SPEC §6.2), and nothing else, so
// that a parameter nobody interpreted can never vanish from the intent.
// It fails only when r.Body is JSON (Opaque empty), not empty, not
// Canonical and not acceptable JSON (see Transform); the error wraps a
// *SyntaxError.
func Fingerprint(r Request) (string, error) {
	pre, err := preimage(r)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(pre)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:]), nil
}

// preimage builds the bytes that Fingerprint hashes.
func preimage(r Request) ([]byte, error) {
	var body []byte
	if len(r.Body) > 0 && (r.Opaque != "" || r.Canonical) {
		body = r.Body
	} else if len(r.Body) > 0 {
		var err error
		if body, err = Transform(r.Body); err != nil {
			return nil, fmt.Errorf("fingerprint body: %w", err)
		}
	}

	names := make([]string, 0, len(r.Query))
	pairs := 0
	size := 64 + len(r.Target) + len(r.Method) + len(r.Path) + len(r.Opaque) + len(body)
	for name, values := range r.Query {
		if len(values) == 0 {
			continue
		}
		names = append(names, name)
		pairs += len(values)
		for _, v := range values {
			size += 2*12 + len(name) + len(v)
		}
	}
	slices.Sort(names) // byte-wise

	headers := make([]string, 0, len(r.Header))
	headerValues := make(map[string][]string, len(r.Header))
	headerPairs := 0
	for name, values := range r.Header {
		if len(values) == 0 {
			continue
		}
		lower := lowerASCII(name)
		if _, seen := headerValues[lower]; !seen {
			headers = append(headers, lower)
		}
		headerValues[lower] = append(headerValues[lower], values...)
		headerPairs += len(values)
		for _, v := range values {
			size += 2*12 + len(name) + len(v)
		}
	}
	slices.Sort(headers)

	buf := make([]byte, 0, size)
	buf = appendField(buf, preimageTag)
	if r.Target != "" {
		// Never a method: a method is upper-cased.
		buf = appendField(buf, "target")
		buf = appendField(buf, r.Target)
	}
	buf = appendField(buf, upperASCII(r.Method))
	buf = appendField(buf, r.Path)
	buf = appendField(buf, strconv.Itoa(pairs))
	for _, name := range names {
		for _, v := range r.Query[name] {
			buf = appendField(buf, name)
			buf = appendField(buf, v)
		}
	}
	if headerPairs > 0 {
		buf = appendField(buf, "headers")
		buf = appendField(buf, strconv.Itoa(headerPairs))
		for _, name := range headers {
			for _, v := range headerValues[name] {
				buf = appendField(buf, name)
				buf = appendField(buf, v)
			}
		}
	}
	switch {
	case body == nil:
		buf = appendField(buf, "nobody")
	case r.Opaque != "":
		buf = appendField(buf, "bytes")
		buf = appendField(buf, r.Opaque)
		buf = appendField(buf, body)
	default:
		buf = appendField(buf, "json")
		buf = appendField(buf, body)
	}
	return buf, nil
}

// appendField appends s as a netstring: its length in decimal, ':', s, ','.
func appendField[S string | []byte](dst []byte, s S) []byte {
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	dst = append(dst, s...)
	return append(dst, ',')
}

// lowerASCII lower-cases A–Z only.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// upperASCII upper-cases a–z only, so that other languages get the same
// bytes whatever their Unicode case tables say.
func upperASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'a' <= b[j] && b[j] <= 'z' {
					b[j] -= 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

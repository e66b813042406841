package idem

import "net/http"

// SetOutgoingKey sets the Idempotency-Key header of a request idem sends
// (the Go client's, the proxy's to its upstream) so that net/http's
// Transport never re-sends it by itself: the Transport treats a request
// carrying "Idempotency-Key" as replayable after a reused connection
// breaks, and only the sender may decide a re-send (SPEC §6.3, §7). The
// header goes under its lower-case name, which the Transport's exact
// lookup misses; field names are case-insensitive on the wire. That
// alone does not hold a GET, nor a request on HTTP/2: idem's clients
// also hold every call that may change the world with
// internal/sendonce.Hold (issue 33 item 1).
func SetOutgoingKey(h http.Header, key string) {
	delete(h, HeaderIdempotencyKey)
	h["idempotency-key"] = []string{key}
}

// MaxKeyLength is the longest idempotency key accepted.
const MaxKeyLength = 255

// ParseKeyHeader returns the idempotency key carried by the values of the
// Idempotency-Key header (SPEC §6.1). No values means no key (""). The value
// may be bare or an RFC 8941 sf-string ("…"); the key is the unquoted value.
// A repeated header, or a key that is empty, longer than 255 characters or
// outside A-Z a-z 0-9 - _ . ~ : / + = @, is IDEMPOTENCY_KEY_INVALID.
func ParseKeyHeader(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", Errorf(CodeIdempotencyKeyInvalid, "the Idempotency-Key header appears %d times; send it exactly once", len(values))
	}
	key := values[0]
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		key = key[1 : len(key)-1]
	}
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// ValidateKey checks a bare key: 1 to 255 characters from
// A-Z a-z 0-9 - _ . ~ : / + = @.
func ValidateKey(key string) error {
	if key == "" {
		return Errorf(CodeIdempotencyKeyInvalid, "the idempotency key is empty; send 1 to %d characters", MaxKeyLength)
	}
	if len(key) > MaxKeyLength {
		return Errorf(CodeIdempotencyKeyInvalid, "the idempotency key has %d characters; the limit is %d", len(key), MaxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if !keyChar(key[i]) {
			return Errorf(CodeIdempotencyKeyInvalid, "the idempotency key has a character outside A-Z a-z 0-9 - _ . ~ : / + = @ at position %d", i+1)
		}
	}
	return nil
}

func keyChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', '~', ':', '/', '+', '=', '@':
		return true
	}
	return false
}

package canonical

import (
	"bytes"
	"fmt"
	"strconv"
)

// appendNumber appends the finite double f as ECMAScript's
// Number.prototype.toString writes it (ECMA-262 Number::toString, radix 10),
// which is how RFC 8785 §3.2.2.3 serializes numbers.
func appendNumber(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // both +0 and -0
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// The shortest digits that round-trip, as "d.ddde±xx"; ECMAScript asks
	// for the same digits (k as small as possible, then the closest).
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	var digitBuf [17]byte
	k, i := 0, 0
	for ; b[i] != 'e'; i++ {
		if b[i] != '.' {
			digitBuf[k] = b[i]
			k++
		}
	}
	digits := digitBuf[:k]
	exp := 0
	for _, c := range b[i+2:] {
		exp = exp*10 + int(c-'0')
	}
	if b[i+1] == '-' {
		exp = -exp
	}
	// In ECMA-262's terms f = 0.digits × 10^n.
	n := exp + 1
	switch {
	case k <= n && n <= 21: // integer: digits then n-k zeros
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21: // decimal point inside the digits
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0: // 0.000ddd
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default: // d.ddde±x
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// MaxExactInteger is 2^53−1, the largest magnitude up to which every integer
// is a double (I-JSON, RFC 7493 §2.2). Beyond it distinct integers round to
// one double, so to one canonical form and one fingerprint: TransformStrict
// refuses every number there (every double beyond it is an integer).
const MaxExactInteger = 1<<53 - 1

// exact reports whether the double f read from a number is within
// ±MaxExactInteger (false for an infinity).
func exact(f float64) bool { return -MaxExactInteger <= f && f <= MaxExactInteger }

// rangeMessage says why TransformStrict refuses the number lit, in the words
// of a JSON Schema: an integer unless it has a fraction or an exponent.
func rangeMessage(lit []byte) string {
	what := "integer"
	if bytes.ContainsAny(lit, ".eE") {
		what = "number"
	}
	return fmt.Sprintf("%s %s is outside the exactly representable range ±%d (I-JSON); send it as a string if the schema declares a string", what, shown(lit), MaxExactInteger)
}

// shown is a number literal as an error message quotes it, at most 40
// bytes.
func shown(lit []byte) string {
	if len(lit) > 40 {
		return string(lit[:37]) + "..."
	}
	return string(lit)
}

package canonical

import "strconv"

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

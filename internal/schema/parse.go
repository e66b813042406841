package schema

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxParseDepth is encoding/json's nesting limit: deeper instances are
// left to it, for its error.
const maxParseDepth = 10000

// parse reads instance into the value santhosh.UnmarshalJSON makes of it
// (objects as map[string]any, arrays as []any, numbers as json.Number),
// without encoding/json's decoder, for the instances it reads without a
// doubt: one JSON value whose numbers are within the limits checkNumbers
// holds them to. ok is false for anything else (a syntax error, a number
// beyond the limits, nesting beyond maxParseDepth), which Validate then
// reads as it always did, for its messages.
func parse(instance []byte) (v any, ok bool) {
	p := parser{data: instance}
	p.space()
	if v, ok = p.value(); !ok {
		return nil, false
	}
	p.space()
	return v, p.pos == len(p.data)
}

type parser struct {
	data  []byte
	pos   int
	depth int
}

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// next reports whether the byte at pos is c.
func (p *parser) next(c byte) bool { return p.pos < len(p.data) && p.data[p.pos] == c }

func (p *parser) value() (any, bool) {
	if p.pos == len(p.data) {
		return nil, false
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, ok := p.string()
		return s, ok
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	return nil, false
}

func (p *parser) literal(word string) bool {
	if !strings.HasPrefix(string(p.data[p.pos:]), word) {
		return false
	}
	p.pos += len(word)
	return true
}

func (p *parser) object() (any, bool) {
	if p.depth++; p.depth > maxParseDepth {
		return nil, false
	}
	p.pos++
	m := map[string]any{}
	p.space()
	if p.next('}') {
		p.pos++
		p.depth--
		return m, true
	}
	for {
		if !p.next('"') {
			return nil, false
		}
		k, ok := p.string()
		if !ok {
			return nil, false
		}
		p.space()
		if !p.next(':') {
			return nil, false
		}
		p.pos++
		p.space()
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		m[k] = v // a repeated name: the last value, as encoding/json
		p.space()
		switch {
		case p.next(','):
			p.pos++
			p.space()
		case p.next('}'):
			p.pos++
			p.depth--
			return m, true
		default:
			return nil, false
		}
	}
}

func (p *parser) array() (any, bool) {
	if p.depth++; p.depth > maxParseDepth {
		return nil, false
	}
	p.pos++
	a := []any{} // never nil, as encoding/json's
	p.space()
	if p.next(']') {
		p.pos++
		p.depth--
		return a, true
	}
	for {
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		a = append(a, v)
		p.space()
		switch {
		case p.next(','):
			p.pos++
			p.space()
		case p.next(']'):
			p.pos++
			p.depth--
			return a, true
		default:
			return nil, false
		}
	}
}

// string reads the string at pos. Printable ASCII without escapes is its
// own content; anything else is unquoted by encoding/json itself, which
// also coerces invalid UTF-8 and lone surrogates to U+FFFD.
func (p *parser) string() (string, bool) {
	start := p.pos + 1
	plain := true
	for i := start; i < len(p.data); i++ {
		switch c := p.data[i]; {
		case c == '"':
			p.pos = i + 1
			if plain {
				return string(p.data[start:i]), true
			}
			var s string
			if json.Unmarshal(p.data[start-1:i+1], &s) != nil {
				return "", false
			}
			return s, true
		case c == '\\':
			plain = false
			i++ // the escaped byte cannot end the string
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			plain = false
		}
	}
	return "", false
}

// number reads a number of JSON's grammar within checkNumbers' limits.
func (p *parser) number() (any, bool) {
	start := p.pos
	if p.next('-') {
		p.pos++
	}
	switch {
	case p.next('0'):
		p.pos++
	case p.digits() == 0:
		return nil, false
	}
	if p.next('.') {
		p.pos++
		if p.digits() == 0 {
			return nil, false
		}
	}
	exp := -1
	if p.next('e') || p.next('E') {
		p.pos++
		exp = p.pos
		if p.next('+') || p.next('-') {
			p.pos++
		}
		if p.digits() == 0 {
			return nil, false
		}
	}
	lit := string(p.data[start:p.pos])
	if len(lit) > maxNumberLen {
		return nil, false
	}
	if exp >= 0 {
		if e, err := strconv.Atoi(string(p.data[exp:p.pos])); err != nil || e > maxExponent || e < -maxExponent {
			return nil, false
		}
	}
	return json.Number(lit), true
}

// digits skips the digits at pos and returns how many there were.
func (p *parser) digits() int {
	n := 0
	for p.pos < len(p.data) && '0' <= p.data[p.pos] && p.data[p.pos] <= '9' {
		p.pos++
		n++
	}
	return n
}

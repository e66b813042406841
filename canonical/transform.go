package canonical

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects that Transform
// accepts; deeper input is refused, so hostile input cannot drive the
// recursive parser arbitrarily deep.
const MaxDepth = 512

// SyntaxError describes input that Transform refuses: JSON that is malformed
// or outside I-JSON (RFC 7493), such as a duplicate member name, invalid UTF-8,
// a lone surrogate, a number beyond the range of a double, trailing data or
// nesting deeper than MaxDepth; and, from TransformStrict, a value outside
// the strict profile.
type SyntaxError struct {
	Offset int // byte offset in the input where the problem was found
	// Pointer is the RFC 6901 JSON Pointer of the value (or member) where
	// the problem was found: "" for the root, or when the problem is in an
	// object's syntax, that object.
	Pointer string
	msg     string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("canonical: %s at offset %d", e.msg, e.Offset)
}

// Reason is the problem alone, without offset or pointer: "duplicate key
// \"a\"", "invalid UTF-8 in string".
func (e *SyntaxError) Reason() string { return e.msg }

// Transform returns the RFC 8785 canonical form of the single JSON value in
// data. It never modifies data. Errors are of type *SyntaxError.
func Transform(data []byte) ([]byte, error) { return transform(data, false) }

// TransformStrict is Transform restricted to what every reader and every
// store reads back as the same value, the profile of idem's input (SPEC
// §6.2). In addition to what Transform refuses, it refuses
//
//   - a number whose magnitude exceeds [MaxExactInteger] (1e400 included):
//     beyond it distinct integers round to one double, and so to one
//     canonical form;
//   - a string or member name containing U+0000, which PostgreSQL text and
//     jsonb cannot hold.
//
// Where it accepts data, its output is Transform's.
func TransformStrict(data []byte) ([]byte, error) { return transform(data, true) }

func transform(data []byte, strict bool) ([]byte, error) {
	w := workPool.Get().(*work)
	defer w.release()
	p := parser{data: data, out: make([]byte, 0, len(data)+len(data)/8), strict: strict, work: w}
	p.skipSpace()
	if err := p.value(); err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.data) {
		return nil, p.errorf("unexpected data after the JSON value")
	}
	return p.out, nil
}

// work holds a parser's scratch buffers, reused across calls.
type work struct {
	members []member // members of the objects being parsed, innermost last
	keys    []byte   // unescaped names of those members
	scratch []byte   // copy of an object's members while they are reordered
	str     []byte   // unescaped content of the last string with escapes
	path    []step   // where the parser is, outermost first, for errors
}

// step is one level of the parser's position: a member of an object or an
// element of an array.
type step struct {
	array            bool
	index            int // the element's index, in an array
	named            bool
	keyStart, keyEnd int // the member's unescaped name in work.keys, once named
}

var workPool = sync.Pool{New: func() any { return new(work) }}

// Buffers larger than these are dropped rather than pooled, so that one huge
// input does not pin its memory.
const (
	maxPooledBytes   = 64 << 10
	maxPooledMembers = 1 << 10
)

func (w *work) release() {
	if cap(w.keys) > maxPooledBytes || cap(w.scratch) > maxPooledBytes || cap(w.str) > maxPooledBytes ||
		cap(w.members) > maxPooledMembers || cap(w.path) > MaxDepth {
		return
	}
	w.members, w.keys, w.scratch, w.str, w.path = w.members[:0], w.keys[:0], w.scratch[:0], w.str[:0], w.path[:0]
	workPool.Put(w)
}

// parser is a recursive-descent JSON parser that writes the canonical form as
// it goes. Objects are written in input order and reordered in place once
// their last member has been read.
type parser struct {
	data   []byte
	pos    int
	depth  int
	out    []byte
	strict bool // TransformStrict
	stopAt int  // PointerAt's offset, 0 otherwise
	*work
}

// member locates one object member while its object is being parsed.
type member struct {
	keyStart, keyEnd int // unescaped name in parser.keys
	start, end       int // `"name":value` in parser.out
	offset           int // input offset of the name, for errors
}

func (p *parser) errorf(format string, args ...any) error {
	return p.errorAt(p.pos, format, args...)
}

func (p *parser) errorAt(offset int, format string, args ...any) error {
	return &SyntaxError{Offset: offset, Pointer: p.pointer(), msg: fmt.Sprintf(format, args...)}
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// pointer is the JSON Pointer of the parser's position.
func (p *parser) pointer() string {
	var b strings.Builder
	for _, s := range p.path {
		switch {
		case s.array:
			b.WriteByte('/')
			b.WriteString(strconv.Itoa(s.index))
		case s.named:
			b.WriteByte('/')
			b.WriteString(pointerEscaper.Replace(string(p.keys[s.keyStart:s.keyEnd])))
		default:
			return b.String() // at a member name: the object is the place
		}
	}
	return b.String()
}

// unexpected reports the byte at p.pos (or the end of input) as out of place.
func (p *parser) unexpected(context string) error {
	if p.pos >= len(p.data) {
		return p.errorf("unexpected end of input %s", context)
	}
	r, size := utf8.DecodeRune(p.data[p.pos:])
	if r == utf8.RuneError && size <= 1 {
		return p.errorf("unexpected byte 0x%02x %s", p.data[p.pos], context)
	}
	return p.errorf("unexpected character %q %s", r, context)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) consume(c byte) bool {
	if p.pos < len(p.data) && p.data[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *parser) value() error {
	if p.pos >= len(p.data) {
		return p.unexpected("where a value was expected")
	}
	var err error
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		err = p.stringValue()
	case c == 't':
		err = p.literal("true")
	case c == 'f':
		err = p.literal("false")
	case c == 'n':
		err = p.literal("null")
	case c == '-' || isDigit(c):
		err = p.number()
	default:
		return p.unexpected("where a value was expected")
	}
	if err == nil && p.stopAt > 0 && p.pos >= p.stopAt {
		return stopped{p.pointer()}
	}
	return err
}

func (p *parser) stringValue() error {
	start := p.pos
	s, err := p.string()
	if err != nil {
		return err
	}
	if p.strict && bytes.IndexByte(s, 0) >= 0 {
		return p.errorAt(start, "%s", nulMessage)
	}
	p.out = appendString(p.out, s)
	return nil
}

// stopped ends the parse of PointerAt at the value it looks for.
type stopped struct{ pointer string }

func (stopped) Error() string { return "canonical: stopped" }

// PointerAt returns the JSON Pointer of the first value in data whose first
// token ends at or after byte offset — an object or array at its opening
// bracket, any other value at its end, the offset encoding/json gives in an
// UnmarshalTypeError — or "" when data ends or is refused before.
func PointerAt(data []byte, offset int) string {
	w := workPool.Get().(*work)
	defer w.release()
	p := parser{data: data, stopAt: max(offset, 1), work: w}
	p.skipSpace()
	var s stopped
	if errors.As(p.value(), &s) {
		return s.pointer
	}
	return ""
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errorf("nesting deeper than %d levels", MaxDepth)
	}
	return nil
}

func (p *parser) object() error {
	if err := p.enter(); err != nil {
		return err
	}
	p.pos++ // '{'
	if p.stopAt > 0 && p.pos >= p.stopAt {
		return stopped{p.pointer()}
	}
	p.out = append(p.out, '{')
	region := len(p.out)
	base, keysBase := len(p.members), len(p.keys)
	p.path = append(p.path, step{})
	p.skipSpace()
	if !p.consume('}') {
		for {
			// Taken again for each member: a nested value may move p.path.
			at := &p.path[len(p.path)-1]
			at.named = false
			if p.pos >= len(p.data) || p.data[p.pos] != '"' {
				return p.unexpected("where an object member name was expected")
			}
			m := member{offset: p.pos}
			name, err := p.string()
			if err != nil {
				return err
			}
			if len(p.members) > base {
				p.out = append(p.out, ',')
			}
			m.keyStart = len(p.keys)
			p.keys = append(p.keys, name...)
			m.keyEnd = len(p.keys)
			at.named, at.keyStart, at.keyEnd = true, m.keyStart, m.keyEnd
			if p.strict && bytes.IndexByte(name, 0) >= 0 {
				return p.errorAt(m.offset, "%s", nulMessage)
			}
			m.start = len(p.out)
			p.out = appendString(p.out, name)
			p.out = append(p.out, ':')
			p.skipSpace()
			if !p.consume(':') {
				return p.unexpected("where ':' was expected after an object member name")
			}
			p.skipSpace()
			if err := p.value(); err != nil {
				return err
			}
			m.end = len(p.out)
			p.members = append(p.members, m)
			p.skipSpace()
			if p.consume(',') {
				p.skipSpace()
				continue
			}
			if p.consume('}') {
				break
			}
			return p.unexpected("where ',' or '}' was expected in an object")
		}
		if err := p.sortMembers(region, p.members[base:]); err != nil {
			return err
		}
	}
	p.members, p.keys = p.members[:base], p.keys[:keysBase]
	p.path = p.path[:len(p.path)-1]
	p.out = append(p.out, '}')
	p.depth--
	return nil
}

// sortMembers puts the members ms of the object whose members start at
// p.out[region] into RFC 8785 order, refusing duplicate names.
func (p *parser) sortMembers(region int, ms []member) error {
	keys := p.keys
	key := func(m member) []byte { return keys[m.keyStart:m.keyEnd] }
	sorted := true
	for i := 1; i < len(ms); i++ {
		if compareUTF16(key(ms[i-1]), key(ms[i])) >= 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}
	slices.SortStableFunc(ms, func(a, b member) int { return compareUTF16(key(a), key(b)) })
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(key(ms[i-1]), key(ms[i])) {
			// The sort is stable, so ms[i] is the later occurrence.
			at := &p.path[len(p.path)-1]
			at.named, at.keyStart, at.keyEnd = true, ms[i].keyStart, ms[i].keyEnd
			return p.errorAt(ms[i].offset, "duplicate key %q", key(ms[i]))
		}
	}
	p.scratch = append(p.scratch[:0], p.out[region:]...)
	p.out = p.out[:region]
	for i, m := range ms {
		if i > 0 {
			p.out = append(p.out, ',')
		}
		p.out = append(p.out, p.scratch[m.start-region:m.end-region]...)
	}
	return nil
}

// compareUTF16 compares two valid UTF-8 strings by their UTF-16 code units,
// as RFC 8785 §3.2.3 sorts member names.
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		if a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
			if a[0] != b[0] {
				return int(a[0]) - int(b[0])
			}
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ra != rb {
			return compareRuneUTF16(ra, rb)
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// compareRuneUTF16 compares two different scalar values by their UTF-16
// encodings. Code points order the same way as their encodings except that
// a supplementary character, encoded from a high surrogate (U+D800–U+DBFF),
// sorts before U+E000–U+FFFF.
func compareRuneUTF16(a, b rune) int {
	const supplementary = 0x10000
	switch {
	case (a < supplementary) == (b < supplementary):
		return int(a) - int(b)
	case a >= supplementary: // b is in the BMP, and not a surrogate
		if b < 0xD800 {
			return 1
		}
		return -1
	default: // b is supplementary
		if a < 0xD800 {
			return -1
		}
		return 1
	}
}

func (p *parser) array() error {
	if err := p.enter(); err != nil {
		return err
	}
	p.pos++ // '['
	if p.stopAt > 0 && p.pos >= p.stopAt {
		return stopped{p.pointer()}
	}
	p.out = append(p.out, '[')
	p.path = append(p.path, step{array: true})
	p.skipSpace()
	if !p.consume(']') {
		for i := 0; ; i++ {
			p.path[len(p.path)-1].index = i
			if err := p.value(); err != nil {
				return err
			}
			p.skipSpace()
			if p.consume(',') {
				p.out = append(p.out, ',')
				p.skipSpace()
				continue
			}
			if p.consume(']') {
				break
			}
			return p.unexpected("where ',' or ']' was expected in an array")
		}
	}
	p.path = p.path[:len(p.path)-1]
	p.out = append(p.out, ']')
	p.depth--
	return nil
}

func (p *parser) literal(word string) error {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return p.errorf("invalid literal (expected %s)", word)
	}
	p.pos += len(word)
	p.out = append(p.out, word...)
	return nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// digits advances over a run of decimal digits and reports whether there was
// at least one.
func (p *parser) digits() bool {
	start := p.pos
	for p.pos < len(p.data) && isDigit(p.data[p.pos]) {
		p.pos++
	}
	return p.pos > start
}

func (p *parser) number() error {
	start := p.pos
	p.consume('-')
	intStart := p.pos
	switch {
	case p.consume('0'):
		if p.pos < len(p.data) && isDigit(p.data[p.pos]) {
			return p.errorf("invalid number: leading zero")
		}
	case !p.digits():
		return p.unexpected("where a digit was expected in a number")
	}
	integer := true
	if p.consume('.') {
		integer = false
		if !p.digits() {
			return p.unexpected("where a digit was expected after '.' in a number")
		}
	}
	if p.consume('e') || p.consume('E') {
		integer = false
		if !p.consume('+') {
			p.consume('-')
		}
		if !p.digits() {
			return p.unexpected("where a digit was expected in a number's exponent")
		}
	}
	lit := p.data[start:p.pos]
	// Integers of up to 15 digits are exact doubles, printed as written.
	if integer && p.pos-intStart <= 15 {
		if string(lit) == "-0" {
			lit = lit[1:]
		}
		p.out = append(p.out, lit...)
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if p.strict && (err != nil || !exact(f)) {
		return p.errorAt(start, "%s", rangeMessage(lit))
	}
	if err != nil || math.IsInf(f, 0) {
		// Only overflow gets here: the syntax was checked above, and
		// underflow rounds to zero without error, as in ECMAScript.
		return p.errorAt(start, "number %s out of range for an IEEE-754 double", shown(lit))
	}
	p.out = appendNumber(p.out, f)
	return nil
}

// string reads the string starting at p.pos and returns its unescaped
// content, which stays valid only until the next call.
func (p *parser) string() ([]byte, error) {
	open := p.pos
	p.pos++
	// Fast path: printable ASCII without escapes is its own content.
	i := p.pos
	for ; i < len(p.data); i++ {
		c := p.data[i]
		if c == '"' {
			s := p.data[p.pos:i]
			p.pos = i + 1
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
	}
	buf := append(p.str[:0], p.data[p.pos:i]...)
	p.pos = i
	for {
		if p.pos >= len(p.data) {
			return nil, p.errorAt(open, "unterminated string")
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			p.str = buf
			return buf, nil
		case c == '\\':
			var err error
			if buf, err = p.escape(buf); err != nil {
				return nil, err
			}
		case c < 0x20:
			return nil, p.errorf("unescaped control character U+%04X in string", c)
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return nil, p.errorf("invalid UTF-8 in string")
			}
			buf = append(buf, p.data[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}

// escape decodes the escape sequence at p.pos, appending it to buf.
func (p *parser) escape(buf []byte) ([]byte, error) {
	start := p.pos
	p.pos++ // '\\'
	if p.pos >= len(p.data) {
		return nil, p.errorAt(start, "unterminated escape sequence")
	}
	c := p.data[p.pos]
	p.pos++
	switch c {
	case '"', '\\', '/':
		return append(buf, c), nil
	case 'b':
		return append(buf, '\b'), nil
	case 'f':
		return append(buf, '\f'), nil
	case 'n':
		return append(buf, '\n'), nil
	case 'r':
		return append(buf, '\r'), nil
	case 't':
		return append(buf, '\t'), nil
	case 'u':
		r, ok := p.hex4()
		if !ok {
			return nil, p.errorAt(start, "invalid \\u escape")
		}
		if utf16.IsSurrogate(r) {
			low := rune(-1)
			if r < 0xDC00 && p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
				save := p.pos
				p.pos += 2
				if l, ok := p.hex4(); ok && 0xDC00 <= l && l <= 0xDFFF {
					low = l
				} else {
					p.pos = save
				}
			}
			if low < 0 {
				return nil, p.errorAt(start, "lone surrogate \\u%04x in string", r)
			}
			r = utf16.DecodeRune(r, low)
		}
		return utf8.AppendRune(buf, r), nil
	}
	if c > ' ' && c < utf8.RuneSelf {
		return nil, p.errorAt(start, "invalid escape sequence \\%c", c)
	}
	return nil, p.errorAt(start, "invalid escape sequence: byte 0x%02x after '\\'", c)
}

// hex4 reads four hexadecimal digits at p.pos.
func (p *parser) hex4() (rune, bool) {
	if len(p.data)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.pos += 4
	return r, true
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string escaped as RFC 8785 §3.2.2.2
// requires: '"' and '\\' are escaped, control characters use \b \t \n \f \r
// or \u00xx, and everything else is written literally.
func appendString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

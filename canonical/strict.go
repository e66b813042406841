package canonical

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// nulMessage says why TransformStrict refuses a string.
const nulMessage = "strings must not contain the NUL character (U+0000)"

// CheckString reports why TransformStrict would refuse s as a string or
// member name (invalid UTF-8, U+0000), or nil: the rule for text that
// reaches a store outside a JSON document (a path parameter, a reason).
func CheckString(s string) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("strings must be valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New(nulMessage)
	}
	return nil
}

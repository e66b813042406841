package idem

import (
	"net/url"
	"testing"
)

// fillPathRegexp is FillPath as routeParam says it: the reference the
// scanner must agree with.
func fillPathRegexp(template string, params map[string]string) string {
	return routeParam.ReplaceAllStringFunc(template, func(m string) string {
		return url.PathEscape(params[m[1:len(m)-1]])
	})
}

func TestFillPath(t *testing.T) {
	params := map[string]string{"a": "x/y", "b": "b b", "é": "ü", "a b": "sp", "{a": "no"}
	for _, tc := range []struct{ name, template, want string }{
		{"none", "/v1/things", "/v1/things"},
		{"empty", "", ""},
		{"one", "/v1/{a}", "/v1/x%2Fy"},
		{"two", "/v1/{a}/c/{b}", "/v1/x%2Fy/c/b%20b"},
		{"adjacent", "/{a}{b}", "/x%2Fyb%20b"},
		{"whole", "{a}", "x%2Fy"},
		{"in a segment", "/files/{a}.txt", "/files/x%2Fy.txt"},
		{"unknown", "/{zz}", "/"},
		{"nested", "/{{a}}", "/{x%2Fy}"},
		{"slash inside", "/{a/b}", "/{a/b}"},
		{"empty name", "/{}/{a}", "/{}/x%2Fy"},
		{"unclosed", "/{a", "/{a"},
		{"unopened", "/a}", "/a}"},
		{"unclosed then param", "/{a/{b}", "/{a/b%20b"},
		{"non-ASCII name", "/{é}", "/%C3%BC"},
		{"space in name", "/{a b}", "/sp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FillPath(tc.template, params); got != tc.want {
				t.Errorf("FillPath(%q) = %q, want %q", tc.template, got, tc.want)
			}
			if ref := fillPathRegexp(tc.template, params); ref != tc.want {
				t.Errorf("the regexp fills %q as %q, want %q", tc.template, ref, tc.want)
			}
		})
	}
}

func FuzzFillPath(f *testing.F) {
	for _, s := range []string{"/v1/{a}", "/{{a}}", "/{a/{b}", "{}", "/{a}{b}.x"} {
		f.Add(s, "v")
	}
	f.Fuzz(func(t *testing.T, template, value string) {
		params := map[string]string{"a": value, "b": value + "/"}
		if got, want := FillPath(template, params), fillPathRegexp(template, params); got != want {
			t.Fatalf("FillPath(%q) = %q, the regexp says %q", template, got, want)
		}
	})
}

package idem

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// A route is a method and a path template whose {name} segments are the
// operation's path parameters (SPEC §3: POST /v1/businesses/{slug}/webhooks).
// This file is the one home of the template's pattern, for every package:
// the names it holds, the path its values make, its shape without names,
// and the net/http ServeMux pattern that serves it.

// routeParam is a {name} of a path template.
var routeParam = regexp.MustCompile(`\{([^{}/]+)\}`)

// PathParamNames returns the names of the {name} segments of a route's
// path template, in order.
func PathParamNames(template string) []string {
	var names []string
	for _, m := range routeParam.FindAllStringSubmatch(template, -1) {
		names = append(names, m[1])
	}
	return names
}

// FillPath substitutes the route template's {name} segments, each escaped.
// It scans for what routeParam matches, without the regexp: it runs on
// every call.
func FillPath(template string, params map[string]string) string {
	var b strings.Builder
	done := 0 // template[:done] is written to b
	for i := 0; i < len(template); i++ {
		if template[i] != '{' {
			continue
		}
		end := i + 1
		for end < len(template) && !strings.ContainsRune("{}/", rune(template[end])) {
			end++
		}
		if end == i+1 || end == len(template) || template[end] != '}' {
			continue // not a {name}: the next '{' may open one
		}
		b.WriteString(template[done:i])
		b.WriteString(url.PathEscape(params[template[i+1:end]]))
		done, i = end+1, end
	}
	if done == 0 {
		return template
	}
	b.WriteString(template[done:])
	return b.String()
}

// RouteShape returns the template with every {name} as {}: two templates of
// one shape reach the same URLs (so two operations may not share one, and a
// renamed parameter changes no URL a caller builds).
func RouteShape(template string) string { return routeParam.ReplaceAllString(template, "{}") }

// routeWellFormed reports whether every { of template opens a {name}.
func routeWellFormed(template string) bool {
	return !strings.Contains(routeParam.ReplaceAllString(template, ""), "{")
}

// MixedRouteSegment returns the first segment of template that mixes text
// and a parameter (/files/{name}.txt), "" when every parameter is a whole
// segment, as the HTTP surface routes them.
func MixedRouteSegment(template string) string {
	for _, seg := range strings.Split(template, "/") {
		if strings.ContainsAny(seg, "{}") && !wholeParam.MatchString(seg) {
			return seg
		}
	}
	return ""
}

// wholeParam is a segment that is exactly one {name}.
var wholeParam = regexp.MustCompile(`^\{[^{}/]+\}$`)

// MuxPattern is the net/http ServeMux pattern of a route template: each
// {name} becomes a wildcard whose name ServeMux accepts ({_p0}, {_p1}, …
// unless name is one already), and wildcards maps those back to the
// parameter names, for Request.PathValue.
func MuxPattern(template string) (pattern string, wildcards map[string]string) {
	wildcards = map[string]string{}
	pattern = routeParam.ReplaceAllStringFunc(template, func(m string) string {
		name := m[1 : len(m)-1]
		w := name
		if !goIdentifier.MatchString(name) {
			w = "_p" + strconv.Itoa(len(wildcards))
		}
		wildcards[w] = name
		return "{" + w + "}"
	})
	return pattern, wildcards
}

// goIdentifier is a wildcard name ServeMux accepts.
var goIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

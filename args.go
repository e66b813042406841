package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strings"
)

// Placement is where the flat arguments of one call travel over HTTP.
type Placement struct {
	PathParams map[string]string
	Query      url.Values
	// Header holds the header arguments under their headers' names; empty
	// when there are none.
	Header http.Header
	// Body is the JSON object of the remaining arguments; nil when there
	// are none.
	Body []byte
}

// PlaceArguments splits a call's flat arguments (the shape MCP tools and
// the CLI take) into path parameters, query parameters and the JSON body.
// locations names the arguments that are not body fields ("path", "query"
// or "header:" + the header's name), as Descriptor.Locations or the
// catalog's x-idem-in annotations say. Path, query and header values must
// be JSON scalars.
func PlaceArguments(locations map[string]string, args map[string]json.RawMessage) (Placement, error) {
	p := Placement{PathParams: map[string]string{}, Query: url.Values{}, Header: http.Header{}}
	body := map[string]json.RawMessage{}
	names := make([]string, 0, len(args))
	for name := range args {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		raw := args[name]
		in := locations[name]
		if in == "" {
			body[name] = raw
			continue
		}
		header, isHeader := strings.CutPrefix(in, "header:")
		if isHeader {
			in = "header " + header
		}
		s, err := scalarString(raw)
		if err != nil {
			return Placement{}, Errorf(CodeInvalidInput, "argument %s travels in the %s and must be a string, number or boolean: %v", name, in, err).
				WithDetail("errors", []map[string]string{{"path": "/" + name, "message": "must be a string, number or boolean"}})
		}
		switch {
		case in == "path":
			p.PathParams[name] = s
		case isHeader:
			p.Header.Set(header, s)
		default:
			p.Query.Set(name, s)
		}
	}
	if len(body) > 0 {
		p.Body, _ = json.Marshal(body)
	}
	return p, nil
}

// scalarString renders a JSON scalar as a path or query value.
func scalarString(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", fmt.Errorf("empty value")
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '{', '[', 'n':
		return "", fmt.Errorf("got %s", raw)
	}
	return string(raw), nil // a number or a boolean, as written
}

// Locations maps each path, query and header argument of the operation to
// "path", "query" or "header:" + the header's canonical name
// ("header:X-Tenant"), as PlaceArguments takes them.
func (d Descriptor) Locations() map[string]string {
	out := map[string]string{}
	for _, p := range d.Params {
		switch p.In {
		case "body":
		case "header":
			out[p.Name] = "header:" + p.Header
		default:
			out[p.Name] = p.In
		}
	}
	return out
}

// LocationsFromSchema reads the x-idem-in (and, for a header, the
// x-idem-header) annotations of a catalog inputSchema (the same map as
// Descriptor.Locations).
func LocationsFromSchema(inputSchema json.RawMessage) map[string]string {
	var s struct {
		Properties map[string]struct {
			In     string `json:"x-idem-in"`
			Header string `json:"x-idem-header"`
		} `json:"properties"`
	}
	out := map[string]string{}
	if json.Unmarshal(inputSchema, &s) == nil {
		for name, p := range s.Properties {
			switch {
			case p.In == "path" || p.In == "query":
				out[name] = p.In
			case p.In == "header" && p.Header != "":
				out[name] = "header:" + textproto.CanonicalMIMEHeaderKey(p.Header)
			}
		}
	}
	return out
}

package pipeline

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/idem-run/idem"
)

// rawRequest is the RawRequest of the call, once validated.
func (x *execution) rawRequest() idem.RawRequest {
	return idem.RawRequest{
		Method: x.op.meta.Method, Path: x.concretePath(), PathParams: x.inv.Intent.PathParams,
		Query: x.inv.Intent.Query, Header: x.forwardedHeader(), Body: x.inv.Intent.Body,
	}
}

// forwardedHeader is the request's own headers with the declared header
// inputs, which over MCP and the Go API come as arguments only (and over
// HTTP are the request's own already).
func (x *execution) forwardedHeader() http.Header {
	in := x.headerInputs()
	if len(in) == 0 {
		return x.inv.Intent.Passthrough
	}
	h := x.inv.Intent.Passthrough.Clone()
	if h == nil {
		h = http.Header{}
	}
	for name, vs := range in {
		for k := range h {
			if strings.EqualFold(k, name) {
				delete(h, k) // a Go caller's own spelling of the name
			}
		}
		h[name] = vs
	}
	return h
}

// opaqueBody is the media type of a raw operation's body when it is not
// JSON (its fingerprint then hashes the bytes, and stage 4 does not read
// it), "" otherwise.
func (x *execution) opaqueBody() string {
	if x.op.raw == nil || len(x.inv.Intent.Body) == 0 {
		return ""
	}
	mt, isJSON := idem.MediaType(x.inv.Intent.ContentType)
	if isJSON {
		return ""
	}
	return mt
}

// rawResult is the answer of a raw operation's handler: its status,
// headers and body as they are, with the execution in Meta (the store
// keeps the replayable headers only). Data is the body when it is JSON (for
// surfaces that wrap it, MCP).
func (x *execution) rawResult(status int, header http.Header, body []byte) idem.Result {
	return idem.RawResult(status, header, body, x.meta())
}

// emptyObjectIsNoBody makes a JSON body {} no body for a raw operation
// whose body is its arguments object (RawSpec.ArgumentsBody, idem
// gateway), so that {}, no body and absent MCP arguments are one intent
// (SPEC §17 rulings): one fingerprint, and the handler sees no body.
func (x *execution) emptyObjectIsNoBody() {
	if x.op.raw == nil || !x.op.raw.ArgumentsBody || x.opaque != "" {
		return
	}
	const space = " \t\r\n" // JSON's whitespace only
	body := bytes.Trim(x.inv.Intent.Body, space)
	if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' || len(bytes.Trim(body[1:len(body)-1], space)) > 0 {
		return
	}
	x.inv.Intent.Body = nil
}

package pipeline

import (
	"net/http"

	"github.com/idem-run/idem"
)

// rawRequest is the RawRequest of the call, once validated.
func (x *execution) rawRequest() idem.RawRequest {
	return idem.RawRequest{
		Method: x.op.meta.Method, Path: x.concretePath(), PathParams: x.inv.Intent.PathParams,
		Query: x.inv.Intent.Query, Header: x.inv.Intent.Passthrough, Body: x.inv.Intent.Body,
	}
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

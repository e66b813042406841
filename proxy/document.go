// Package proxy puts idem's pipeline in front of an HTTP API described by
// an OpenAPI 3.0 or 3.1 document (idem proxy, SPEC §15): one raw
// operation (idem.DefineRaw) per OpenAPI operation, its retry contract
// from the document's x-idem-agent-retry extension, an overlay file or
// the method, and a handler that forwards the call to the upstream.
//
// The package builds operations and forwards; the pipeline, the stores
// and the surfaces are idem's own, the same as idem serve's.
package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// maxDocumentBytes bounds an OpenAPI document or overlay read.
const maxDocumentBytes = 16 << 20

// Document is a loaded OpenAPI document, with its source bytes.
type Document struct {
	*openapi3.T
	// Source is the document as read (JSON or YAML).
	Source []byte
}

// Load reads the OpenAPI document at source: a file, an http(s) URL, or a
// path on the upstream (starting with /, e.g. /openapi.json). External
// references are refused: the document must be self-contained.
func Load(ctx context.Context, source string, upstream *url.URL, client *http.Client) (*Document, error) {
	data, err := read(ctx, source, upstream, client)
	if err != nil {
		return nil, fmt.Errorf("openapi document %s: %w", source, err)
	}
	doc, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("openapi document %s: %w", source, err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		return nil, fmt.Errorf("openapi document %s: openapi %q is not 3.0 or 3.1", source, doc.OpenAPI)
	}
	if doc.Paths == nil || doc.Paths.Len() == 0 {
		return nil, fmt.Errorf("openapi document %s: it has no paths", source)
	}
	return &Document{T: doc, Source: data}, nil
}

// parse parses an OpenAPI document and resolves its references. A JSON
// document is decoded as JSON: kin-openapi reads every document as YAML
// first, which for a large JSON document costs many times its size (a
// 14 MB document took 2.3 GB of allocations and a 1.5 GiB peak).
// kin-openapi itself falls back to JSON for what YAML refuses, so a JSON
// document means the same either way.
func parse(data []byte) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	if !json.Valid(data) {
		return loader.LoadFromData(data)
	}
	doc := &openapi3.T{}
	if err := json.Unmarshal(data, doc); err != nil {
		return nil, err
	}
	if err := loader.ResolveRefsIn(doc, nil); err != nil {
		return nil, err
	}
	return doc, nil
}

// read returns the bytes at source (see Load).
func read(ctx context.Context, source string, upstream *url.URL, client *http.Client) ([]byte, error) {
	var u *url.URL
	switch {
	case strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://"):
		var err error
		if u, err = url.Parse(source); err != nil {
			return nil, err
		}
	case strings.HasPrefix(source, "/") && upstream != nil && !fileExists(source):
		u = upstream.JoinPath(source)
	default:
		f, err := os.Open(source)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readLimited(f)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s answered %s", u, resp.Status)
	}
	return readLimited(resp.Body)
}

func readLimited(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxDocumentBytes+1))
	if err == nil && len(data) > maxDocumentBytes {
		err = fmt.Errorf("larger than %d bytes", maxDocumentBytes)
	}
	return data, err
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// jsonOf marshals v (a kin-openapi value) to generic JSON.
func jsonOf(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

package httpapi

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/idem-run/idem"
)

// WellKnownProtectedResource is where OAuth 2.0 protected resource
// metadata is served (RFC 9728 §3): the metadata of a resource whose URL
// has a path is at this path followed by the resource's path.
const WellKnownProtectedResource = "/.well-known/oauth-protected-resource"

// ProtectedResource describes idem as an OAuth 2.0 protected resource (RFC
// 9728) so that a client that was answered 401 finds the authorization
// server to get a token from: the 401's WWW-Authenticate names the
// resource's metadata document (resource_metadata), and the document names
// the resource and the authorization servers. idem is a resource server
// only: it verifies tokens (jwtauth), it issues none.
//
// A nil *ProtectedResource describes nothing: Challenge is the plain
// bearer challenge, and there is no metadata.
type ProtectedResource struct {
	authorizationServers []string
	origin               string // normalized; "" for the request's own, on loopback only
	basePath             string
}

// ProtectedResourceConfig configures NewProtectedResource.
type ProtectedResourceConfig struct {
	// AuthorizationServers are the issuer identifiers (RFC 8414) whose
	// tokens the server accepts. Required.
	AuthorizationServers []string
	// PublicURL is the origin clients reach the server at,
	// scheme://host[:port] ("https://idem.example.com"): the resource
	// identifiers and metadata URLs are built on it. When empty, a
	// request's own origin (its Host header, https when it came over TLS)
	// is used, and only when that host is a loopback one (localhost,
	// 127.0.0.1, [::1]): a Host header is whatever the client sent, so
	// beyond one's own machine the public URL must be configured.
	PublicURL string
	// BasePath is the prefix the server's handler is mounted under ("" at
	// the root).
	BasePath string
}

// NewProtectedResource checks cfg.
func NewProtectedResource(cfg ProtectedResourceConfig) (*ProtectedResource, error) {
	if len(cfg.AuthorizationServers) == 0 {
		return nil, fmt.Errorf("httpapi: ProtectedResourceConfig.AuthorizationServers is required")
	}
	p := &ProtectedResource{authorizationServers: cfg.AuthorizationServers, basePath: strings.TrimRight(cfg.BasePath, "/")}
	if cfg.PublicURL != "" {
		o, err := PublicOrigin(cfg.PublicURL)
		if err != nil {
			return nil, err
		}
		p.origin = o
	}
	return p, nil
}

// PublicOrigin checks and normalizes a public URL: http or https, a host,
// no path (a trailing slash aside), query, fragment or user.
func PublicOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("public URL %q is not scheme://host[:port] with scheme http or https (without a path: the base path is configured apart)", s)
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host), nil
}

// originOf is the origin resource URLs are built on for r: the configured
// public one, else r's own when its host is a loopback one.
func (p *ProtectedResource) originOf(r *http.Request) (string, bool) {
	if p.origin != "" {
		return p.origin, true
	}
	u, err := url.Parse("http://" + r.Host)
	if err != nil || u.Host != r.Host || u.Host == "" || u.User != nil || u.Path != "" || !loopbackHost(u.Hostname()) {
		return "", false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + strings.ToLower(u.Host), true
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Resource returns the resource identifier of the surface at path under
// the handler ("" for the HTTP API, "/mcp" for MCP): the URL a client
// reaches it at, for r. ok is false when no origin can be trusted for r.
func (p *ProtectedResource) Resource(r *http.Request, path string) (resource string, ok bool) {
	if p == nil {
		return "", false
	}
	origin, ok := p.originOf(r)
	if !ok {
		return "", false
	}
	return origin + p.basePath + path, true
}

// MetadataURL returns the URL of the metadata document of the resource at
// path, for r: under the handler, at WellKnownProtectedResource followed
// by path. With no base path that is the URL RFC 9728 §3.1 builds from
// the resource identifier.
func (p *ProtectedResource) MetadataURL(r *http.Request, path string) (string, bool) {
	if p == nil {
		return "", false
	}
	origin, ok := p.originOf(r)
	if !ok {
		return "", false
	}
	return origin + p.basePath + WellKnownProtectedResource + path, true
}

// Challenge is the WWW-Authenticate value of a 401 answered to r by the
// surface at path: Challenge's, with resource_metadata naming the
// surface's metadata document (RFC 9728 §5.1).
func (p *ProtectedResource) Challenge(r *http.Request, path string) string {
	c := Challenge(r)
	if u, ok := p.MetadataURL(r, path); ok {
		c += fmt.Sprintf(", resource_metadata=%q", u)
	}
	return c
}

// protectedResourceMetadata is the document of RFC 9728 §2, the members
// idem has something to say in.
type protectedResourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// MetadataHandler serves the metadata document of the resource at path
// (GET and HEAD; OPTIONS for a browser's preflight). It is public and
// carries no credentials, so any origin may read it (CORS *). A request
// for which no origin can be trusted (no public URL, a Host that is not a
// loopback one) is answered 404 NOT_FOUND, saying how to configure it.
func (p *ProtectedResource) MetadataHandler(path string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		case http.MethodOptions:
			h.Set("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "*")
			w.WriteHeader(http.StatusNoContent)
			return
		default:
			h.Set("Allow", "GET, HEAD, OPTIONS")
			write(w, idem.ErrorResult(idem.Errorf(idem.CodeMethodNotAllowed, "%s is not allowed on %s; use GET", r.Method, r.URL.Path), nil))
			return
		}
		resource, ok := p.Resource(r, path)
		if !ok {
			write(w, idem.ErrorResult(idem.Errorf(idem.CodeNotFound,
				"no protected resource metadata for Host %q: only a loopback host's is derived from the request; start idem with --public-url (server.Config.PublicURL) to serve it", r.Host), nil))
			return
		}
		body, err := json.Marshal(protectedResourceMetadata{
			Resource: resource, AuthorizationServers: p.authorizationServers,
			BearerMethodsSupported: []string{"header"}, ResourceName: "idem",
		})
		if err != nil {
			write(w, idem.ErrorResult(err, nil))
			return
		}
		if p.origin == "" {
			h.Set("Cache-Control", "no-store") // derived from this request's Host
		}
		writeBody(w, http.StatusOK, http.Header{"Content-Type": {idem.ContentTypeJSON}}, body)
	})
}

// insufficientScope is the WWW-Authenticate value of a 403 FORBIDDEN: the
// caller's credentials are valid but lack a role the action needs (RFC
// 6750 §3.1).
const insufficientScope = `Bearer realm="idem", error="insufficient_scope"`

package proxy_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-run/idem/proxy"
)

// aliasBomb is YAML whose aliases expand to 9^10 strings.
func aliasBomb(tail string) string {
	var b strings.Builder
	b.WriteString("openapi: 3.0.3\ninfo: {title: t, version: '1'}\nx-a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	prev := "a"
	for i := range 9 {
		name := fmt.Sprintf("b%d", i)
		fmt.Fprintf(&b, "x-%s: &%s [%s]\n", name, name, strings.TrimSuffix(strings.Repeat("*"+prev+", ", 9), ", "))
		prev = name
	}
	return b.String() + tail
}

func TestLoadRefuses(t *testing.T) {
	const paths = "paths:\n  /a:\n    get:\n      operationId: a\n      responses: {'200': {description: ok}}\n"
	for _, tc := range []struct {
		name, text string
		want       string
	}{
		{"an alias bomb", aliasBomb(paths), "aliasing"},
		{"no paths", "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths: {}\n", "no paths"},
		{"swagger 2", "swagger: '2.0'\ninfo: {title: t, version: '1'}\n" + paths, ""},
		{"an external reference", "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /a:\n    get:\n      operationId: a\n      responses:\n        '200': {$ref: 'other.yaml#/components/responses/ok'}\n", ""},
		{"over 16 MiB", "openapi: 3.0.3\ninfo: {title: t, version: '1'}\n" + paths + "x-pad: '" + strings.Repeat("x", 16<<20) + "'\n", "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "openapi.yaml")
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			doc, err := proxy.Load(t.Context(), path, nil, nil)
			if err == nil {
				t.Fatalf("loaded: %d paths", doc.Paths.Len())
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q: want the source and %q", err, tc.want)
			}
		})
	}
}

func TestParseOverlayRefusesAnAliasBomb(t *testing.T) {
	if _, err := proxy.ParseOverlay([]byte(aliasBomb(""))); err == nil || !strings.Contains(err.Error(), "aliasing") {
		t.Fatalf("error %v", err)
	}
}

func TestLoadFromTheUpstream(t *testing.T) {
	text, err := os.ReadFile("testdata/shop31.json")
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/openapi.json" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(text)
	})
	base := mustURL(t, up.URL+"/v1")
	doc, err := proxy.Load(t.Context(), "/openapi.json", base, proxy.NewClient())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc.Source, text) || doc.Paths.Len() != 1 {
		t.Fatalf("loaded %d paths from %d bytes", doc.Paths.Len(), len(doc.Source))
	}
	if _, err := proxy.Load(t.Context(), "/missing.json", base, proxy.NewClient()); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("a 404: %v", err)
	}
	if _, err := proxy.Load(t.Context(), up.URL+"/v1/openapi.json", nil, proxy.NewClient()); err != nil {
		t.Fatalf("by URL: %v", err)
	}
}

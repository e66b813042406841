package idem_test

import (
	"net/url"
	"testing"

	"github.com/idem-run/idem"
)

func TestTargetOf(t *testing.T) {
	for _, row := range []struct{ name, url, want string }{
		{"origin", "http://api.example:9000", "http://api.example:9000"},
		{"trailing slash", "http://api.example:9000/", "http://api.example:9000"},
		{"case", "HTTP://API.Example:9000", "http://api.example:9000"},
		{"default port", "https://api.example:443/v2/", "https://api.example/v2"},
		{"user and query left out", "http://u:p@api.example/v2?x=1#f", "http://api.example/v2"},
		{"IPv6", "http://[::1]:9000", "http://[::1]:9000"},
		{"IPv6 default port", "http://[::1]:80/", "http://[::1]"},
	} {
		t.Run(row.name, func(t *testing.T) {
			u, err := url.Parse(row.url)
			if err != nil {
				t.Fatal(err)
			}
			if got := idem.TargetOf(u); got != row.want {
				t.Fatalf("TargetOf(%s) = %q, want %q", row.url, got, row.want)
			}
		})
	}
	if idem.TargetOf(nil) != "" {
		t.Fatal("TargetOf(nil) is not empty")
	}
}

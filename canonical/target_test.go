package canonical

import (
	"strings"
	"testing"
)

// TestTargetInThePreimage: a target opens the preimage after the version
// and changes the fingerprint; without one the preimage is unchanged.
func TestTargetInThePreimage(t *testing.T) {
	r := Request{Method: "POST", Path: "/things"}
	without, _ := preimage(r)
	if strings.Contains(string(without), "target") {
		t.Fatalf("a preimage without a target: %s", without)
	}
	r.Target = "http://x:9000"
	with, _ := preimage(r)
	if want := "19:idem-fingerprint-v1,6:target,13:http://x:9000,4:POST,"; !strings.HasPrefix(string(with), want) {
		t.Fatalf("preimage %s, want it to open with %s", with, want)
	}
	a, _ := Fingerprint(r)
	r.Target = "http://y:9000"
	b, _ := Fingerprint(r)
	if a == b {
		t.Fatal("two targets, one fingerprint")
	}
}

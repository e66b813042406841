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

// TestFingerprintAtVersions: version 2 is Fingerprint; version 1 leaves
// the target out, so a request without one has one fingerprint under
// both; an unknown version is an error.
func TestFingerprintAtVersions(t *testing.T) {
	r := Request{Method: "POST", Path: "/things", Body: []byte(`{"b":1,"a":2}`), Target: "https://up.example/api"}
	now, _ := Fingerprint(r)
	untargeted := r
	untargeted.Target = ""
	before, _ := Fingerprint(untargeted)
	for _, tt := range []struct {
		name    string
		r       Request
		version int
		want    string
	}{
		{"version 2 is Fingerprint", r, 2, now},
		{"version 1 leaves the target out", r, 1, before},
		{"without a target, version 1", untargeted, 1, before},
		{"without a target, version 2", untargeted, 2, before},
	} {
		got, err := FingerprintAt(tt.r, tt.version)
		if err != nil || got != tt.want {
			t.Errorf("%s: %s, %v; want %s", tt.name, got, err, tt.want)
		}
	}
	if now == before {
		t.Fatal("a target does not change the fingerprint")
	}
	for _, v := range []int{0, 3} {
		if _, err := FingerprintAt(r, v); err == nil {
			t.Errorf("FingerprintAt(version %d) = no error", v)
		}
	}
	if FingerprintVersion != 2 {
		t.Fatalf("FingerprintVersion = %d: a new version needs its row above and its case in FingerprintAt", FingerprintVersion)
	}
}

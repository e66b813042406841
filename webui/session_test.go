package webui

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/idem-run/idem/internal/fakeclock"
)

func TestSessionsExpire(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := newSessions(clock, 10*time.Minute, time.Hour)
	id, sess := s.open(bob)
	if len(id) != 43 || sess.csrf == "" || sess.csrf == id {
		t.Fatalf("session id %q, csrf %q: want 256-bit base64url values, distinct", id, sess.csrf)
	}
	if _, raw := s.byID[[sha256.Size]byte([]byte(id[:32]))]; raw {
		t.Fatal("the table is keyed by the raw id")
	}
	if _, hashed := s.byID[sha256.Sum256([]byte(id))]; !hashed {
		t.Fatal("the table does not hold the id's SHA-256")
	}
	if got := s.lookup(id); got == nil || got.principal.ID != "bob" {
		t.Fatalf("lookup = %+v", got)
	}
	if s.lookup("") != nil || s.lookup(id+"x") != nil {
		t.Fatal("an unknown id found a session")
	}

	// Use within the idle timeout keeps it alive up to the absolute one.
	for range 6 {
		clock.Advance(9 * time.Minute)
		if s.lookup(id) == nil {
			t.Fatalf("session ended while in use, at %s", clock.Now())
		}
	}
	clock.Advance(7 * time.Minute) // 61 min after sign-in
	if s.lookup(id) != nil {
		t.Fatal("session outlived its absolute timeout")
	}

	idle, _ := s.open(alice)
	clock.Advance(10 * time.Minute)
	if s.lookup(idle) != nil {
		t.Fatal("session outlived its idle timeout")
	}

	closed, _ := s.open(alice)
	s.close(closed)
	if s.lookup(closed) != nil {
		t.Fatal("a closed session still works")
	}
}

func TestSessionsPruneOnOpen(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := newSessions(clock, time.Minute, time.Hour)
	for range 5 {
		s.open(alice)
	}
	clock.Advance(2 * time.Minute)
	s.open(bob)
	if len(s.byID) != 1 {
		t.Fatalf("%d sessions kept, want only the live one", len(s.byID))
	}
}

func TestValidCSRF(t *testing.T) {
	sess := &session{csrf: "abc"}
	for token, want := range map[string]bool{"abc": true, "": false, "abd": false, "ab": false, "abcd": false} {
		if got := sess.validCSRF(token); got != want {
			t.Errorf("validCSRF(%q) = %v, want %v", token, got, want)
		}
	}
	if (&session{}).validCSRF("") {
		t.Error("an empty token matched an empty synchronizer token")
	}
}

// A session opened with a credential that expires (a JWT's exp) ends when
// it does, well inside the idle and absolute timeouts, and its cookie is
// not asked to live longer (issue 28, item 5: an approver whose token had
// expired still approved through the console).
func TestSessionEndsWithItsCredential(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := newSessions(clock, 10*time.Minute, time.Hour)
	p := bob
	p.Expires = clock.Now().Add(5 * time.Minute)
	if got := s.lifetime(p); got != 5*time.Minute {
		t.Fatalf("lifetime = %s, want the token's 5m", got)
	}
	if got := s.lifetime(alice); got != time.Hour {
		t.Fatalf("lifetime without an expiry = %s, want the absolute 1h", got)
	}
	id, _ := s.open(p)
	clock.Advance(4 * time.Minute)
	if s.lookup(id) == nil {
		t.Fatal("session ended before its token expired")
	}
	clock.Advance(time.Minute)
	if s.lookup(id) != nil {
		t.Fatal("session outlived its token's expiry")
	}
}

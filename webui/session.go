package webui

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"

	"github.com/idem-run/idem"
)

// session is one signed-in browser. Its id lives only in the cookie; the
// server keeps the id's SHA-256, so a dump of the table opens no session.
type session struct {
	principal idem.Principal
	// csrf is the synchronizer token every form of this session carries.
	csrf     string
	created  time.Time
	lastSeen time.Time
}

// sessions is the in-memory session table of one process.
type sessions struct {
	clock    idem.Clock
	idle     time.Duration
	absolute time.Duration

	mu   sync.Mutex
	byID map[[sha256.Size]byte]*session
}

func newSessions(clock idem.Clock, idle, absolute time.Duration) *sessions {
	return &sessions{clock: clock, idle: idle, absolute: absolute, byID: map[[sha256.Size]byte]*session{}}
}

// randomToken returns 256 random bits, base64url-encoded.
func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("webui: no randomness: " + err.Error()) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// open starts a session for p and returns its id (for the cookie) and the
// session. Expired sessions are dropped on the way.
func (s *sessions) open(p idem.Principal) (string, *session) {
	id := randomToken()
	now := s.clock.Now()
	sess := &session{principal: p, csrf: randomToken(), created: now, lastSeen: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, old := range s.byID {
		if s.expired(old, now) {
			delete(s.byID, h)
		}
	}
	s.byID[sha256.Sum256([]byte(id))] = sess
	return id, sess
}

// lookup returns the live session of id and marks it used; nil when id is
// unknown or its session expired (idle or absolute).
func (s *sessions) lookup(id string) *session {
	if id == "" {
		return nil
	}
	h := sha256.Sum256([]byte(id))
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.byID[h]
	if !ok {
		return nil
	}
	if s.expired(sess, now) {
		delete(s.byID, h)
		return nil
	}
	sess.lastSeen = now
	c := *sess
	return &c
}

// close ends the session of id, if any.
func (s *sessions) close(id string) {
	h := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, h)
}

// expired reports whether sess is past its idle or absolute timeout, or
// past the expiry of the credential it was opened with (a JWT's exp).
func (s *sessions) expired(sess *session, now time.Time) bool {
	return now.Sub(sess.lastSeen) >= s.idle || now.Sub(sess.created) >= s.absolute ||
		!sess.principal.Expires.IsZero() && !now.Before(sess.principal.Expires)
}

// lifetime is how long a session opened now for p may last at most: the
// absolute timeout, or less when p's credential expires sooner.
func (s *sessions) lifetime(p idem.Principal) time.Duration {
	d := s.absolute
	if !p.Expires.IsZero() {
		d = min(d, p.Expires.Sub(s.clock.Now()))
	}
	return max(d, 0)
}

// validCSRF reports whether token is the session's synchronizer token.
func (sess *session) validCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(sess.csrf)) == 1
}

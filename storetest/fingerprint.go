package storetest

import (
	"net/http"
	"testing"
)

func init() {
	register("FingerprintVersionIsKept", testFingerprintVersionIsKept)
}

// A record keeps the version of its fingerprint's preimage through every
// path that makes or returns it (Reserve, Complete, GetAttempt, Reserve
// meeting it, Transact's final record and Transact meeting it), and 0
// (none given) reads as 0: a record made before versions were stored
// (SPEC §6.2, issue 33 item 5).
func testFingerprintVersionIsKept(t *testing.T, e *env) {
	s := e.s(t)
	for _, version := range []int{0, 2} {
		key := "key-v" + string(rune('0'+version))
		p := reserveParams(scopeA, key, fpOne)
		p.FingerprintVersion = version
		r := mustReserve(t, s, p)
		if r.Attempt.FingerprintVersion != version {
			t.Fatalf("Reserve(version %d) = version %d", version, r.Attempt.FingerprintVersion)
		}
		done, err := s.Complete(ctx(t), completeParams(r.Attempt, http.StatusCreated, `{"data":{}}`))
		if err != nil || done.FingerprintVersion != version {
			t.Fatalf("Complete(version %d) = version %d, %v", version, done.FingerprintVersion, err)
		}
		if got := mustGet(t, s, scopeA, key); got.FingerprintVersion != version || got.Fingerprint != fpOne {
			t.Fatalf("GetAttempt(version %d) = %+v", version, got)
		}
		again := reserveParams(scopeA, key, fpTwo)
		again.FingerprintVersion = 2
		if res, err := s.Reserve(ctx(t), again); err != nil || res.Reserved || res.Attempt.FingerprintVersion != version {
			t.Fatalf("Reserve meeting the record of version %d = %+v, %v", version, res, err)
		}
		tp := reserveParams(scopeA, key+"-tx", fpOne)
		tp.FingerprintVersion = version
		res, err := transactor(t, s).Transact(ctx(t), tp, succeed(e, key))
		if err != nil || !res.Committed || res.Attempt.FingerprintVersion != version {
			t.Fatalf("Transact(version %d) = %+v, %v", version, res, err)
		}
		if got := mustGet(t, s, scopeA, key+"-tx"); got.FingerprintVersion != version {
			t.Fatalf("the transactional record of version %d reads version %d", version, got.FingerprintVersion)
		}
		res, err = transactor(t, s).Transact(ctx(t), tp, succeed(e, key+"-again"))
		if err != nil || res.Reserved || res.Attempt.FingerprintVersion != version {
			t.Fatalf("Transact meeting the record of version %d = %+v, %v", version, res, err)
		}
		// With an approval to consume (another statement on PostgreSQL).
		a := approvedApproval(t, e, "agent-1", fpTwo)
		ap := reserveParams(scopeA, key+"-apr", fpTwo)
		ap.FingerprintVersion, ap.ApprovalID = version, a.ID
		if r := mustReserve(t, s, ap); !r.Reserved || r.Attempt.FingerprintVersion != version {
			t.Fatalf("Reserve with an approval (version %d) = %+v", version, r)
		}
		if got := mustGet(t, s, scopeA, key+"-apr"); got.FingerprintVersion != version {
			t.Fatalf("the approved record of version %d reads version %d", version, got.FingerprintVersion)
		}
	}
}

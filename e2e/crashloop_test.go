package e2e

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// crashLease is the lease of order.refund under --lease-grace 200ms: its
// 5 s timeout times two attempts (one runtime retry), plus the grace.
const crashLease = 10200 * time.Millisecond

// TestCrashLoop kills `idem serve --demo` with SIGKILL at random moments
// while 6 clients send refunds (new keys and same-key retries; some slow,
// some with failAfterEffect), restarts it on the same store, and after
// every round retries every key sent so far. Each answer is checked
// against all earlier ones (ledger.observe): no key executes twice, a
// completed record keeps replaying its execution, an indeterminate one
// stays so, and the gateway ledger holds one execution per request key.
// Once the last lease has passed every key must be final: replayed or
// indeterminate, a key that was never reserved having executed once on
// its retry. The same with two servers on one PostgreSQL database, one of
// them killed and restarted every round while the other keeps serving and
// answers for the dead one's keys.
func TestCrashLoop(t *testing.T) {
	t.Parallel()
	rounds := 3
	if longRun() {
		rounds = 25
	}
	together(t, map[string]func(t *testing.T){
		"sqlite": func(t *testing.T) {
			dir := t.TempDir()
			crashLoop(t, stores["sqlite"](t, dir), dir, false, rounds)
		},
		"postgres": func(t *testing.T) {
			dir := t.TempDir()
			crashLoop(t, stores["postgres"](t, dir), dir, false, rounds)
		},
		"postgres two servers": func(t *testing.T) {
			dir := t.TempDir()
			crashLoop(t, stores["postgres"](t, dir), dir, true, rounds)
		},
	})
}

func crashLoop(t *testing.T, url, dir string, two bool, rounds int) {
	grace := []string{"--lease-grace", "200ms"}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	l := &ledger{}
	victim := serve(t, url, dir, grace...)
	var survivor *server
	if two {
		survivor = serve(t, url, dir, grace...)
	}
	var check *server
	pending := 0
	for round := 1; round <= rounds; round++ {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Add(1)
			wrng := rand.New(rand.NewPCG(seed, uint64(round*100+w)))
			go func() {
				defer wg.Done()
				var mine []*keyed
				for {
					select {
					case <-stop:
						return
					default:
					}
					var k *keyed
					if len(mine) > 0 && wrng.IntN(6) == 0 {
						k = mine[wrng.IntN(len(mine))]
					} else {
						k = l.newRefund(wrng, fmt.Sprintf("crash%d", round))
						mine = append(mine, k)
					}
					s := victim
					if two && wrng.IntN(2) == 0 {
						s = survivor
					}
					if _, err := l.send(t, s, k, true); err != nil && s == victim {
						<-stop // the victim is dead
						return
					}
				}
			}()
		}
		time.Sleep(300*time.Millisecond + rand.N(1200*time.Millisecond))
		victim.kill(t)
		close(stop)
		wg.Wait()
		l.markAnswered()
		if two {
			check = survivor
			pending = l.retryAll(t, check, true)
			l.checkLedger(t, check, false)
			victim = serve(t, url, dir, grace...)
		} else {
			victim = serve(t, url, dir, grace...)
			check = victim
			pending = l.retryAll(t, check, true)
			l.checkLedger(t, check, false)
		}
		l.tally.add("rounds", 1)
		if t.Failed() {
			t.Fatalf("round %d failed (seed %d): %s", round, seed, &l.tally)
		}
	}
	// Every record left in flight by a kill becomes indeterminate once its
	// lease passes, read through a live server.
	for end := time.Now().Add(crashLease + 15*time.Second); pending > 0; {
		if time.Now().After(end) {
			t.Fatalf("%d keys still in flight %s after the last kill", pending, crashLease+15*time.Second)
		}
		time.Sleep(250 * time.Millisecond)
		pending = l.retryAll(t, check, false)
	}
	l.checkLedger(t, check, true)
	completed, indeterminate := l.counts()
	l.tally.add("final completed", completed)
	l.tally.add("final indeterminate", indeterminate)
	if l.get("executed") == 0 || l.get("answered before a kill") == 0 {
		t.Fatalf("the load did nothing: %s", &l.tally)
	}
	t.Logf("figures: %s: %s", t.Name(), &l.tally)
}

package e2e

import (
	"database/sql"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // checkpoint's driver
)

// TestSQLiteOutages breaks the SQLite store under a running server in the
// two ways a disk fails while the process lives: the database becomes
// read-only (the immutable attribute on the database and its WAL: every
// write, even through a file already open, fails with EPERM) and the disk
// fills up (a small file system filled by another file). In both the server must
// fail closed: a keyed refund is either refused with a retryable 503
// STORE_UNAVAILABLE, its key not consumed and nothing run, or it holds a
// reservation; replays of completed records keep being served. On a full
// disk a reservation may still fit where the refund's own transaction
// does not (the WAL reuses its space once checkpointed): that refund
// reports nothing refunded (demo.refundOrder, NotDispatched) and its key
// is released, or, when the release does not fit either, its 503 is not
// retryable, names the reconcile read and leaves the key held (SPEC §6.4),
// to become indeterminate by lease like a record whose completion the full
// disk refused (answered, but its record left in flight). Once the disk is
// writable again the same server recovers without a restart: the refused
// keys execute once, the held ones and those whose completion was refused
// end indeterminate, and every key's answer stays consistent
// (ledger.observe, the gateway ledger).
//
// It needs root and a loop device (mount -o loop, chattr), as CI has;
// elsewhere it skips (on CI, CI=true, a machine with loop devices and
// mkfs.ext4 that cannot mount fails instead).
func TestSQLiteOutages(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small file system and set the immutable attribute")
	}
	// Without loop devices or mkfs.ext4 the machine cannot host the test:
	// skip, saying so. Where they exist, a failing mount is a failure on CI.
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices on this machine (%v)", err)
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skipf("no mkfs.ext4 on this machine (%v)", err)
	}
	// A 32 MiB ext4 file system on a loop device: ext4 (unlike tmpfs)
	// refuses writes to an immutable file through descriptors opened
	// before, and -m 0 lets it fill up for root too.
	tmp := t.TempDir()
	fs, image := filepath.Join(tmp, "fs"), filepath.Join(tmp, "fs.ext4")
	if err := os.Mkdir(fs, 0o755); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(fs, "idem.db")
	sh(t, "truncate", "-s", "32M", image)
	sh(t, "mkfs.ext4", "-q", "-F", "-m", "0", image)
	if out, err := exec.Command("mount", "-o", "loop", image, fs).CombinedOutput(); err != nil {
		// Root in a container may have no loop devices. CI runs on a
		// machine of its own, where this must work.
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount -o loop: %v %s", err, out)
		}
		t.Skipf("cannot loop-mount a file system (%v %s)", err, out)
	}
	t.Cleanup(func() {
		exec.Command("chattr", "-i", db, db+"-wal").Run()
		if out, err := exec.Command("umount", fs).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", fs, err, out)
		}
	})
	s := serve(t, "sqlite:"+db, fs, "--lease-grace", "200ms")
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	l := &ledger{}
	var warm []*keyed
	for range 10 {
		k := l.newRefund(rng, "warm")
		l.send(t, s, k, true)
		warm = append(warm, k)
	}

	// recover waits until a new keyed refund succeeds again on s.
	recover := func(what string) {
		t.Helper()
		waitFor(t, 30*time.Second, "recovery from "+what, func() bool {
			k := l.newRefund(rng, "recover")
			r, err := l.send(t, s, k, true)
			return err == nil && r.status != 503
		})
		l.tally.add("outages survived", 1)
	}

	t.Run("read-only", func(t *testing.T) {
		sh(t, "chattr", "+i", db, db+"-wal")
		var refused []*keyed
		for range 10 {
			k := l.newRefund(rng, "readonly")
			r, err := l.send(t, s, k, true)
			if err != nil || r.status != 503 || r.body["retryable"] != true || r.header.Get("Retry-After") == "" {
				t.Fatalf("keyed refund on a read-only store: %v %d %s", err, r.status, r.raw)
			}
			refused = append(refused, k)
		}
		for _, k := range warm {
			if r, _ := l.send(t, s, k, true); r.status == 503 {
				t.Fatalf("%s: no replay from a read-only store: %s", k.key, r.raw)
			}
		}
		notRun(t, s, refused)
		sh(t, "chattr", "-i", db, db+"-wal")
		recover("a read-only database")
		for _, k := range refused {
			if r, _ := l.send(t, s, k, true); r.get("meta.executionId") == nil || r.get("meta.idempotency.replayed") == true {
				t.Fatalf("%s: refused with 503, then %d %s; want it to execute now", k.key, r.status, r.raw)
			}
		}
	})

	t.Run("disk full", func(t *testing.T) {
		// The WAL checkpointed, as the writer does every 1,000 pages or so,
		// so that it has room to reuse when the disk fills: a reservation
		// may then fit where the refund's own transaction, its release or
		// its completion does not.
		checkpoint(t, db)
		filler := fill(t, fs)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var refused, held, answered []*keyed
		for w := range 4 {
			wg.Add(1)
			wrng := rand.New(rand.NewPCG(seed, uint64(10+w)))
			go func() {
				defer wg.Done()
				for n := 0; n < 100; n++ {
					select {
					case <-stop:
						return
					default:
					}
					k := l.newRefund(wrng, "full")
					r, err := l.send(t, s, k, true)
					if err == nil && r.status < 500 {
						mu.Lock()
						answered = append(answered, k)
						mu.Unlock()
					}
					if err != nil || r.status != 503 {
						continue
					}
					mu.Lock()
					if r.body["retryable"] == true {
						refused = append(refused, k)
						if r.get("meta.attempts") != nil { // the handler ran
							l.tally.add("disk full: refused after the reservation, released", 1)
						}
					} else if r.get("details.reconcile") == "order.show" {
						held = append(held, k)
					} else {
						t.Errorf("%s: a 503 neither retryable nor naming the reconcile read: %s", k.key, r.raw)
					}
					mu.Unlock()
				}
			}()
		}
		waitFor(t, 60*time.Second, "a 503 STORE_UNAVAILABLE from a full disk", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(refused)+len(held) >= 8
		})
		close(stop)
		wg.Wait()
		notRun(t, s, refused)
		for _, k := range held {
			if r := s.do(t, "GET", "/v1/attempts/"+k.key, k.token, ""); r.status != 200 {
				t.Fatalf("%s: a 503 not retryable, but its record reads %d %s; want the key held", k.key, r.status, r.raw)
			}
		}
		notAtGateway(t, s, held) // nothing ran: its release failed
		l.tally.add("disk full: refused", len(refused))
		l.tally.add("disk full: held", len(held))
		// An answer below 500 whose record still reads in flight (no other
		// call with its key runs): its completion was refused after the
		// answer was made, and the record becomes indeterminate by lease
		// (pipeline finalize). It is no longer counted completed.
		for _, k := range answered {
			r := s.do(t, "GET", "/v1/attempts/"+k.key, k.token, "")
			if r.status == 200 && r.get("data.state") == "in_flight" {
				l.mu.Lock()
				k.completed, k.result = false, ""
				l.mu.Unlock()
				l.tally.add("disk full: completion refused", 1)
			}
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		recover("a full disk")
	})

	// Every key, retried: completed ones replay, refused ones ran once,
	// records whose completion (or release) the full disk refused became
	// indeterminate.
	for end := time.Now().Add(crashLease + 15*time.Second); l.retryAll(t, s, true) > 0; time.Sleep(250 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("keys still in flight after their lease")
		}
	}
	l.checkLedger(t, s, true)
	t.Logf("figures: %s: %s", t.Name(), &l.tally)
}

// notRun fails unless none of keys reached the gateway or holds a record.
func notRun(t *testing.T, s *server, keys []*keyed) {
	t.Helper()
	for _, k := range keys {
		if r := s.do(t, "GET", "/v1/attempts/"+k.key, k.token, ""); r.status != 404 {
			t.Fatalf("%s: refused with 503 but its record reads %d %s", k.key, r.status, r.raw)
		}
	}
	notAtGateway(t, s, keys)
}

// notAtGateway fails if any of keys reached the gateway.
func notAtGateway(t *testing.T, s *server, keys []*keyed) {
	t.Helper()
	refused := map[string]bool{}
	for _, k := range keys {
		refused[principals[k.token]+" "+k.key] = true
	}
	for _, token := range []string{"demo-agent", "demo-other-org"} {
		for _, e := range ledgerEffects(t, s, token) {
			if refused[e["principal"].(string)+" "+e["requestKey"].(string)] {
				t.Fatalf("a refund refused with 503 reached the gateway: %v", e)
			}
		}
	}
}

// checkpoint copies the WAL of the SQLite database at path into it from a
// connection of this process (PASSIVE: beside the server's), so that the
// server's next write starts the WAL again from its beginning.
func checkpoint(t *testing.T, path string) {
	t.Helper()
	c, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var busy, frames, done int
	if err := c.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &done); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint: %d of the WAL's %d frames copied (busy %d)", done, frames, busy)
}

// fill writes a file in dir until the file system is full and returns its
// path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, size := range []int{1 << 20, 4 << 10, 1} {
		buf := make([]byte, size)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	return path
}

// sh runs a command, failing the test on error.
func sh(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v %s", name, args, err, out)
	}
}

package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestJournalDir(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    string
		wantErr bool
	}{
		{"IDEM_JOURNAL first", map[string]string{"IDEM_JOURNAL": "/j", "XDG_STATE_HOME": "/x", "HOME": "/h"}, "/j", false},
		{"IDEM_JOURNAL cleaned", map[string]string{"IDEM_JOURNAL": "/j/../k/"}, "/k", false},
		{"relative IDEM_JOURNAL refused", map[string]string{"IDEM_JOURNAL": "state", "HOME": "/h"}, "", true},
		{"XDG_STATE_HOME", map[string]string{"XDG_STATE_HOME": "/x", "HOME": "/h"}, "/x/idem", false},
		{"relative XDG_STATE_HOME ignored", map[string]string{"XDG_STATE_HOME": "x", "HOME": "/h"}, "/h/.local/state/idem", false},
		{"HOME", map[string]string{"HOME": "/h"}, "/h/.local/state/idem", false},
		{"nothing", map[string]string{}, "", true},
		{"relative HOME", map[string]string{"HOME": "."}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := JournalDir(func(k string) string { return tt.env[k] })
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("JournalDir = %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestTaskFingerprint(t *testing.T) {
	fp := func(op, args string) string {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(args), &m); err != nil {
			t.Fatal(err)
		}
		s, err := TaskFingerprint(op, m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := fp("order.refund", `{"id":"ord_1","amount":100}`)
	if len(base) != 64 || strings.ToLower(base) != base {
		t.Fatalf("fingerprint %q is not lower-case hex SHA-256", base)
	}
	same := []string{`{"amount":100,"id":"ord_1"}`, `{ "id" : "ord_1", "amount" : 1.00e2 }`}
	for _, args := range same {
		if got := fp("order.refund", args); got != base {
			t.Errorf("%s: fingerprint differs from the same intent", args)
		}
	}
	differ := map[string]string{
		"another operation": fp("order.show", `{"id":"ord_1","amount":100}`),
		"another amount":    fp("order.refund", `{"id":"ord_1","amount":101}`),
		"a string amount":   fp("order.refund", `{"id":"ord_1","amount":"100"}`),
		"array order":       fp("order.refund", `{"id":"ord_1","amount":100,"tags":["a","b"]}`),
	}
	for name, got := range differ {
		if got == base {
			t.Errorf("%s: same fingerprint", name)
		}
	}
	if fp("order.refund", `{"id":"ord_1","amount":100,"tags":["a","b"]}`) == fp("order.refund", `{"id":"ord_1","amount":100,"tags":["b","a"]}`) {
		t.Error("array order is ignored")
	}
	empty, err := TaskFingerprint("auth.context_token", nil)
	if err != nil || empty != fp("auth.context_token", `{}`) {
		t.Fatalf("nil arguments = %q, %v", empty, err)
	}
}

func entry(task, key string) Entry {
	return Entry{Task: task, Key: key, Operation: "order.refund", Fingerprint: "fp-" + task, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func TestFileJournalPutGet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "idem")
	j, err := OpenFileJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("journal directory: %v %v", st, err)
	}
	if _, ok, err := j.Get("t1"); ok || err != nil {
		t.Fatalf("Get on an empty journal = %v, %v", ok, err)
	}
	if err := j.Put(entry("t1", "k1")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(j.Path()); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("journal file: %v %v", st, err)
	}
	got, ok, err := j.Get("t1")
	if err != nil || !ok || got != entry("t1", "k1") {
		t.Fatalf("Get = %+v %v %v", got, ok, err)
	}
	// The same entry again is a no-op; another key or intent is refused.
	if err := j.Put(entry("t1", "k1")); err != nil {
		t.Fatalf("re-Put of the same entry: %v", err)
	}
	var conflict *TaskConflictError
	if err := j.Put(entry("t1", "k2")); !errors.As(err, &conflict) || conflict.Existing.Key != "k1" {
		t.Fatalf("Put of another key = %v", err)
	}
	other := entry("t1", "k1")
	other.Fingerprint = "another"
	if err := j.Put(other); !errors.As(err, &conflict) {
		t.Fatalf("Put of another intent with the same key = %v", err)
	}
	if err := j.Put(entry("t2", "k3")); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(j.Path())
	if lines := strings.Count(string(data), "\n"); lines != 2 {
		t.Fatalf("journal has %d lines, want 2:\n%s", lines, data)
	}
	for _, bad := range []Entry{{Key: "k", Operation: "o"}, {Task: "t", Operation: "o"}, {Task: "t", Key: "k"}} {
		if err := j.Put(bad); err == nil {
			t.Errorf("Put(%+v) accepted", bad)
		}
	}
}

func TestFileJournalLastEntryWinsAndTornLines(t *testing.T) {
	dir := t.TempDir()
	first, _ := json.Marshal(entry("t", "old"))
	second, _ := json.Marshal(entry("t", "new"))
	content := string(first) + "\n" + "not json\n" + string(second) + "\n" + `{"task":"torn","ke`
	if err := os.WriteFile(filepath.Join(dir, JournalFile), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := OpenFileJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := j.Get("t"); !ok || got.Key != "new" {
		t.Fatalf("Get = %+v, want the last entry", got)
	}
	if _, ok, _ := j.Get("torn"); ok {
		t.Fatal("a torn line reads as an entry")
	}
	// An entry put after a torn line starts on a line of its own.
	if err := j.Put(entry("after", "k")); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := j.Get("after"); !ok || got.Key != "k" {
		t.Fatalf("Get after a torn line = %+v %v", got, ok)
	}
	all, err := j.Entries()
	if err != nil || len(all) != 2 || all[0].Task != "after" || all[1].Task != "t" {
		t.Fatalf("Entries = %+v, %v", all, err)
	}
}

func TestFileJournalFsync(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenFileJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	var synced []string
	j.sync = func(f *os.File) error {
		synced = append(synced, f.Name())
		return f.Sync()
	}
	if err := j.Put(entry("a", "k1")); err != nil {
		t.Fatal(err)
	}
	if want := []string{dir, j.Path()}; fmt.Sprint(synced) != fmt.Sprint(want) {
		t.Fatalf("first Put synced %v, want the directory (new file) and then the file %v", synced, want)
	}
	synced = nil
	if err := j.Put(entry("b", "k2")); err != nil {
		t.Fatal(err)
	}
	if want := []string{j.Path()}; fmt.Sprint(synced) != fmt.Sprint(want) {
		t.Fatalf("second Put synced %v, want %v", synced, want)
	}
	synced = nil
	if err := j.Put(entry("b", "k2")); err != nil || len(synced) != 0 {
		t.Fatalf("a no-op Put synced %v (%v)", synced, err)
	}
	// A failed fsync fails the Put: the caller must not dispatch.
	j.sync = func(*os.File) error { return errors.New("disk on fire") }
	if err := j.Put(entry("c", "k3")); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Put with a failing fsync = %v", err)
	}
}

// TestFileJournalConcurrentPut races many runs of one task, each through
// its own journal and file handle: exactly one key wins, everyone else is
// told which.
func TestFileJournalConcurrentPut(t *testing.T) {
	dir := t.TempDir()
	const n = 32
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, err := OpenFileJournal(dir)
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = j.Put(entry("race", fmt.Sprintf("k%d", i)))
		}()
	}
	wg.Wait()
	checkOneWinner(t, dir, errs)
}

// checkOneWinner checks that exactly one Put won the task "race" and
// every other one got a conflict naming the winner's key.
func checkOneWinner(t *testing.T, dir string, errs []error) {
	t.Helper()
	j, _ := OpenFileJournal(dir)
	won, ok, err := j.Get("race")
	if err != nil || !ok {
		t.Fatalf("Get = %v %v", ok, err)
	}
	winners := 0
	for i, err := range errs {
		var conflict *TaskConflictError
		switch {
		case err == nil:
			winners++
		case errors.As(err, &conflict) && conflict.Existing.Key == won.Key:
		default:
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	data, _ := os.ReadFile(j.Path())
	if winners != 1 || strings.Count(string(data), "\n") != 1 {
		t.Fatalf("%d winners; journal:\n%s", winners, data)
	}
}

// TestFileJournalConcurrentProcesses races separate processes (this test
// binary re-run as a helper) on one task.
func TestFileJournalConcurrentProcesses(t *testing.T) {
	if os.Getenv("IDEM_JOURNAL_HELPER") != "" {
		t.Skip("helper process")
	}
	dir := t.TempDir()
	const n = 6
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestJournalHelperProcess$", "-test.count=1")
		cmds[i].Env = append(os.Environ(), "IDEM_JOURNAL_HELPER=1", "IDEM_JOURNAL_DIR="+dir, fmt.Sprintf("IDEM_JOURNAL_KEY=p%d", i))
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
	}
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	errs := make([]error, n)
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i].String())
		}
		switch out := outs[i].String(); {
		case strings.Contains(out, "RESULT won"):
		case strings.Contains(out, "RESULT conflict "):
			key := strings.Fields(out[strings.Index(out, "RESULT conflict ")+len("RESULT conflict "):])[0]
			errs[i] = &TaskConflictError{Existing: Entry{Key: key}}
		default:
			t.Fatalf("helper %d said:\n%s", i, out)
		}
	}
	checkOneWinner(t, dir, errs)
}

// TestJournalHelperProcess is one process of
// TestFileJournalConcurrentProcesses.
func TestJournalHelperProcess(t *testing.T) {
	if os.Getenv("IDEM_JOURNAL_HELPER") == "" {
		t.Skip("run by TestFileJournalConcurrentProcesses")
	}
	j, err := OpenFileJournal(os.Getenv("IDEM_JOURNAL_DIR"))
	if err != nil {
		t.Fatal(err)
	}
	err = j.Put(entry("race", os.Getenv("IDEM_JOURNAL_KEY")))
	var conflict *TaskConflictError
	switch {
	case err == nil:
		fmt.Println("RESULT won")
	case errors.As(err, &conflict):
		fmt.Println("RESULT conflict", conflict.Existing.Key)
	default:
		t.Fatal(err)
	}
}

func TestOpenFileJournalNeedsAbsoluteDir(t *testing.T) {
	if _, err := OpenFileJournal("relative/dir"); err == nil {
		t.Fatal("a relative journal directory was accepted")
	}
}

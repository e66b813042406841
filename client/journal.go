package client

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/idem-run/idem/canonical"
)

// Entry is one task of the attempt journal: the key its first run minted
// and the intent the key names.
type Entry struct {
	Task      string `json:"task"`
	Key       string `json:"key"`
	Operation string `json:"operation"`
	// Fingerprint is TaskFingerprint of the operation and its arguments.
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"createdAt"`
}

// Journal is durable agent task state (SPEC §10.3 --task): the key of
// each task, recorded before the first live request so that a re-run of
// the task re-sends the same key.
type Journal interface {
	// Get returns the entry of task; false when the task is unknown.
	Get(task string) (Entry, bool, error)
	// Put records e durably before it returns. If the journal already
	// holds another entry for e.Task (another key, operation or
	// fingerprint), Put records nothing and returns a *TaskConflictError
	// naming it; re-recording the same entry is a no-op.
	Put(e Entry) error
}

// TaskConflictError is Put's answer when the task is already journaled
// with another entry: typically a concurrent run of the same task won.
type TaskConflictError struct {
	Existing Entry
}

func (e *TaskConflictError) Error() string {
	return fmt.Sprintf("task %q is already journaled with key %s for %s", e.Existing.Task, e.Existing.Key, e.Existing.Operation)
}

// SameIntent reports whether two entries name the same intent: operation
// and fingerprint.
func (e Entry) SameIntent(o Entry) bool {
	return e.Operation == o.Operation && e.Fingerprint == o.Fingerprint
}

// TaskFingerprint is the journal's fingerprint of an intent given on the
// command line: the lower-case hex SHA-256 of
//
//	"idem-task-v1\n" + operation + "\n" + canonical(args)
//
// where canonical is RFC 8785 (canonical.Transform) of the flat argument
// object. It needs no request: two runs agree exactly when they name the
// same operation with arguments that are equal as JSON.
func TaskFingerprint(operation string, args map[string]json.RawMessage) (string, error) {
	if args == nil {
		args = map[string]json.RawMessage{}
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return "", fmt.Errorf("task fingerprint: %w", err)
	}
	canon, err := canonical.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("task fingerprint: %w", err)
	}
	h := sha256.New()
	h.Write([]byte("idem-task-v1\n" + operation + "\n"))
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// JournalFile is the name of the journal in its directory.
const JournalFile = "journal.jsonl"

// JournalDir returns the journal's directory: $IDEM_JOURNAL, else
// $XDG_STATE_HOME/idem (an absolute XDG_STATE_HOME only, as the XDG Base
// Directory specification says), else $HOME/.local/state/idem. It is never
// the current directory: a relative IDEM_JOURNAL is refused, and without
// any of the three variables JournalDir fails.
func JournalDir(getenv func(string) string) (string, error) {
	if d := getenv("IDEM_JOURNAL"); d != "" {
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("IDEM_JOURNAL=%q is not an absolute path; the journal never lives relative to the current directory", d)
		}
		return filepath.Clean(d), nil
	}
	if d := getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "idem"), nil
	}
	if h := getenv("HOME"); h != "" && filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "idem"), nil
	}
	return "", errors.New("no state directory for the attempt journal: set IDEM_JOURNAL, XDG_STATE_HOME or HOME")
}

// FileJournal is a Journal in one append-only file of JSON lines
// (JournalFile in its directory), one Entry per line; when a task has
// several lines, the last one counts. Every Put holds an exclusive flock
// on the file while it reads the file and appends, and fsyncs the file
// (and, when it created the file, the directory) before it returns, so
// concurrent runs of one task cannot both mint a key, and a recorded key
// survives a crash.
type FileJournal struct {
	dir string
	// sync flushes f to stable storage; tests observe it.
	sync func(f *os.File) error
}

var _ Journal = (*FileJournal)(nil)

// OpenFileJournal returns the journal in dir, creating dir (mode 0700) if
// needed; the file itself is created by the first Put (mode 0600).
func OpenFileJournal(dir string) (*FileJournal, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("journal directory %q is not absolute", dir)
	}
	j := &FileJournal{dir: dir, sync: (*os.File).Sync}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create the journal directory: %w", err)
		}
		// Make the new directory's name durable too.
		if err := j.syncDir(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("journal directory: %w", err)
	}
	return j, nil
}

// Path returns the journal file's path.
func (j *FileJournal) Path() string { return filepath.Join(j.dir, JournalFile) }

// Get returns the last entry of task, under a shared lock.
func (j *FileJournal) Get(task string) (Entry, bool, error) {
	f, err := os.Open(j.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("open the journal: %w", err)
	}
	defer f.Close()
	if err := lockFile(f, false); err != nil {
		return Entry{}, false, err
	}
	defer unlockFile(f)
	entries, _, err := readEntries(f)
	if err != nil {
		return Entry{}, false, err
	}
	e, ok := entries[task]
	return e, ok, nil
}

// Entries returns the last entry of every task, sorted by task.
func (j *FileJournal) Entries() ([]Entry, error) {
	f, err := os.Open(j.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open the journal: %w", err)
	}
	defer f.Close()
	if err := lockFile(f, false); err != nil {
		return nil, err
	}
	defer unlockFile(f)
	entries, _, err := readEntries(f)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(entries))
	for _, e := range entries {
		out = append(out, e)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Task < out[b].Task })
	return out, nil
}

// Put appends e under an exclusive lock unless the task is journaled
// already (see Journal.Put), then fsyncs.
func (j *FileJournal) Put(e Entry) error {
	if e.Task == "" || e.Key == "" || e.Operation == "" {
		return errors.New("journal entry needs a task, a key and an operation")
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = time.Now().UTC()
	}
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	line = append(line, '\n')

	created := false
	f, err := os.OpenFile(j.Path(), os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		created = true
	} else if errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(j.Path(), os.O_RDWR|os.O_APPEND, 0)
	}
	if err != nil {
		return fmt.Errorf("open the journal: %w", err)
	}
	defer f.Close()
	if created {
		// The file's name must survive a crash as much as its content.
		if err := j.syncDir(j.dir); err != nil {
			return err
		}
	}
	if err := lockFile(f, true); err != nil {
		return err
	}
	defer unlockFile(f)

	entries, tail, err := readEntries(f)
	if err != nil {
		return err
	}
	if old, ok := entries[e.Task]; ok {
		if old.Key == e.Key && old.SameIntent(e) {
			return nil
		}
		return &TaskConflictError{Existing: old}
	}
	if tail {
		// A torn last line (a write that never completed): end it, so that
		// this entry starts on a line of its own.
		line = append([]byte{'\n'}, line...)
	}
	if _, err := f.Write(line); err != nil {
		return fmt.Errorf("append to the journal: %w", err)
	}
	if err := j.sync(f); err != nil {
		return fmt.Errorf("fsync the journal: %w", err)
	}
	return nil
}

// syncDir fsyncs a directory, so that names created in it are durable.
func (j *FileJournal) syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s to fsync it: %w", dir, err)
	}
	defer d.Close()
	if err := j.sync(d); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// readEntries reads the whole file from its start: the last entry of each
// task, and whether the file ends without a newline. Lines that are not
// entries (a torn write) are skipped.
func readEntries(f *os.File) (map[string]Entry, bool, error) {
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return nil, false, fmt.Errorf("read the journal: %w", err)
	}
	entries := map[string]Entry{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		var e Entry
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Task == "" || e.Key == "" {
			continue
		}
		entries[e.Task] = e
	}
	if err := sc.Err(); err != nil {
		return nil, false, fmt.Errorf("read the journal: %w", err)
	}
	return entries, len(data) > 0 && data[len(data)-1] != '\n', nil
}

package secretbox_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/idem-run/idem/secretbox"
)

const header = "# idem secret key — keep private; first key seals, all keys open"

func b64(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// writeKeyFile writes content to a new file in a temporary directory with
// exactly mode perm, and returns its path.
func writeKeyFile(t *testing.T, content string, perm fs.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return path
}

func TestLoadOrCreateKeyFileCreatesThenReuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret.key")

	first, err := secretbox.LoadOrCreateKeyFile(path)
	if err != nil {
		t.Fatalf("first LoadOrCreateKeyFile: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("created key file mode = %04o, want 0600", fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) != 3 || lines[0] != header || lines[2] != "" {
		t.Fatalf("key file = %q, want the header line, one key line and a final newline", data)
	}
	key, err := base64.StdEncoding.DecodeString(lines[1])
	if err != nil || len(key) != secretbox.KeySize {
		t.Fatalf("key line decodes to %d bytes, %v; want %d", len(key), err, secretbox.KeySize)
	}
	if want := mustNew(t, key).KeyID(); first.KeyID() != want {
		t.Errorf("KeyID = %s, want the id of the key in the file, %s", first.KeyID(), want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the key file (no temporary files left)", len(entries))
	}

	ct, id := mustSeal(t, first, []byte("secret"), []byte("aad"))
	second, err := secretbox.LoadOrCreateKeyFile(path)
	if err != nil {
		t.Fatalf("second LoadOrCreateKeyFile: %v", err)
	}
	if second.KeyID() != first.KeyID() {
		t.Errorf("second KeyID = %s, want %s", second.KeyID(), first.KeyID())
	}
	if got, err := second.Open(ct, []byte("aad"), id); err != nil || string(got) != "secret" {
		t.Errorf("second box Open(first box's ciphertext) = (%q, %v)", got, err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
		t.Errorf("second call changed the key file")
	}
}

func TestLoadOrCreateKeyFileConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret.key")
	const n = 8
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		ids   [n]string
		errs  [n]error
	)
	for i := range n {
		wg.Go(func() {
			<-start
			b, err := secretbox.LoadOrCreateKeyFile(path)
			if err != nil {
				errs[i] = err
				return
			}
			ids[i] = b.KeyID()
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("goroutine %d: %v", i, errs[i])
		} else if ids[i] != ids[0] {
			t.Errorf("goroutine %d got KeyID %s, goroutine 0 %s", i, ids[i], ids[0])
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "secret.key" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only secret.key", names)
	}
	if b, err := secretbox.LoadOrCreateKeyFile(path); err != nil || b.KeyID() != ids[0] {
		t.Errorf("LoadOrCreateKeyFile afterwards = (%v, %v), want KeyID %s", b, err, ids[0])
	}
}

func TestLoadOrCreateKeyFileRefusesBroadPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permission bits on Windows")
	}
	for _, perm := range []fs.FileMode{0o644, 0o640, 0o604, 0o660, 0o666, 0o700, 0o601} {
		t.Run(fmt.Sprintf("%04o", perm), func(t *testing.T) {
			key := testKey(1)
			path := writeKeyFile(t, header+"\n"+b64(key)+"\n", perm)
			b, err := secretbox.LoadOrCreateKeyFile(path)
			if perm&0o077 == 0 { // 0700: owner-only, accepted
				if err != nil {
					t.Fatalf("LoadOrCreateKeyFile on mode %04o: %v", perm, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadOrCreateKeyFile on mode %04o = %v, want an error", perm, b)
			}
			if want := "chmod 600 " + path; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
			if strings.Contains(err.Error(), b64(key)) {
				t.Errorf("error %q contains the key", err)
			}
		})
	}
}

func TestLoadOrCreateKeyFileAcceptsNarrowerModes(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permission bits on Windows")
	}
	for _, perm := range []fs.FileMode{0o600, 0o400} {
		path := writeKeyFile(t, b64(testKey(1))+"\n", perm)
		if _, err := secretbox.LoadOrCreateKeyFile(path); err != nil {
			t.Errorf("mode %04o: %v", perm, err)
		}
	}
}

func TestLoadOrCreateKeyFileRotation(t *testing.T) {
	oldKey, newKey := testKey(1), testKey(2)
	oldBox := mustNew(t, oldKey)
	ct, oldID := mustSeal(t, oldBox, []byte("sealed before rotation"), []byte("aad"))

	// Comments, blank lines, indentation and CRLF line ends are all fine.
	content := header + "\r\n" +
		"\n" +
		"# rotated 2025-01-01\r\n" +
		"  " + b64(newKey) + "  \r\n" +
		"\t\n" +
		"   # previous key, keep until its secrets expire\n" +
		b64(oldKey) // no final newline
	path := writeKeyFile(t, content, 0o600)
	b, err := secretbox.LoadOrCreateKeyFile(path)
	if err != nil {
		t.Fatalf("LoadOrCreateKeyFile: %v", err)
	}
	if want := mustNew(t, newKey).KeyID(); b.KeyID() != want {
		t.Errorf("KeyID = %s, want the first key's %s", b.KeyID(), want)
	}
	if got, err := b.Open(ct, []byte("aad"), oldID); err != nil || string(got) != "sealed before rotation" {
		t.Errorf("Open(old ciphertext) = (%q, %v)", got, err)
	}
}

func TestLoadOrCreateKeyFileMalformed(t *testing.T) {
	good, other := b64(testKey(1)), b64(testKey(2))
	short := b64(testKey(3)[:16])
	long := b64(bytes.Repeat([]byte{4}, 33))
	unpadded := strings.TrimRight(good, "=")
	typo := "!" + other[1:]
	for _, tc := range []struct {
		name    string
		content string
		want    string // in the error
		secrets []string
	}{
		{"not base64", header + "\n" + good + "\n\n" + typo + "\n", "line 4:", []string{good, typo, typo[1:12]}},
		{"short key", "# c\n" + short + "\n" + good + "\n", "line 2: key is 16 bytes, want 32", []string{short, good}},
		{"long key", good + "\n" + long + "\n", "line 2: key is 33 bytes, want 32", []string{good, long}},
		{"unpadded", unpadded + "\n", "line 1:", []string{unpadded, unpadded[:12]}},
		{"two keys on a line", good + " " + other + "\n", "line 1:", []string{good, other}},
		{"duplicate", header + "\n" + good + "\n" + other + "\n" + good + "\n", "line 4 repeats line 2", []string{good, other}},
		{"no key", header + "\n\n# nothing else\n", "holds no key", nil},
		{"empty", "", "holds no key", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeKeyFile(t, tc.content, 0o600)
			b, err := secretbox.LoadOrCreateKeyFile(path)
			if err == nil {
				t.Fatalf("LoadOrCreateKeyFile = %v, want an error", b)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, path) {
				t.Errorf("error %q does not name the file and contain %q", msg, tc.want)
			}
			for _, s := range tc.secrets {
				if strings.Contains(msg, s) {
					t.Errorf("error %q contains key material %q", msg, s)
				}
			}
			if after, _ := os.ReadFile(path); string(after) != tc.content {
				t.Errorf("LoadOrCreateKeyFile changed a malformed key file")
			}
		})
	}
}

func TestLoadOrCreateKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := secretbox.LoadOrCreateKeyFile(filepath.Join(dir, "missing", "secret.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("key file in a missing directory: %v, want fs.ErrNotExist", err)
	}
	if _, err := secretbox.LoadOrCreateKeyFile(dir); err == nil {
		t.Errorf("key file that is a directory: no error")
	}
}

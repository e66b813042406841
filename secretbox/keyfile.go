package secretbox

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// keyFileHeader is the comment line that starts a key file written by
// LoadOrCreateKeyFile.
const keyFileHeader = "# idem secret key — keep private; first key seals, all keys open"

// maxKeyFileSize bounds what LoadOrCreateKeyFile reads: thousands of keys.
const maxKeyFileSize = 1 << 20

// LoadOrCreateKeyFile returns a Box over the keys in the file at path,
// creating the file with a new random key if it does not exist.
//
// The file holds one key per line, the standard base64 encoding (with
// padding) of KeySize bytes; the first key seals and all of them open. Blank
// lines and lines starting with '#' are ignored. To rotate, put a new key on
// the first line and keep the old ones below it for as long as ciphertexts
// they sealed must still open.
//
// The file must not be accessible to group or others (mode 0600 or
// narrower); a broader one is refused, with the chmod that fixes it. A new
// file is written whole under a temporary name, synced, and then linked to
// path only if path still does not exist, so two processes starting at once
// both end up with the same key and neither ever reads a half-written file.
// The directory is synced after the link. The directory must exist.
//
// Errors name the file and the line at fault; they never contain key
// material.
func LoadOrCreateKeyFile(path string) (*Box, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createKeyFile(path); err != nil {
			return nil, err
		}
		// Read back what was linked: ours, or the key of a process that
		// created the file first.
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, fmt.Errorf("secretbox: key file: %w", err)
	}
	defer f.Close()
	return readKeyFile(f, path)
}

// CheckKeyFile reports, creating nothing that stays, whether
// LoadOrCreateKeyFile(path) would fail: an existing file must be a valid
// key file this process can read; for a missing one, the process must be
// able to create a file in its directory (a probe file, removed). A
// command checks its key file this way before it creates anything else.
func CheckKeyFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		probe, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
		if err != nil {
			return fmt.Errorf("secretbox: key file %s does not exist and cannot be created (%w): give a path in a directory this process can write", path, err)
		}
		probe.Close()
		return os.Remove(probe.Name())
	}
	if err != nil {
		return fmt.Errorf("secretbox: key file: %w", err)
	}
	defer f.Close()
	_, err = readKeyFile(f, path)
	return err
}

// createKeyFile writes a new key file at path unless one appears there
// first, in which case it returns nil and leaves that one alone.
func createKeyFile(path string) (err error) {
	key := make([]byte, KeySize)
	defer clear(key)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("secretbox: create key file %s: read random key: %w", path, err)
	}
	content := make([]byte, 0, len(keyFileHeader)+base64.StdEncoding.EncodedLen(KeySize)+2)
	defer func() { clear(content[:cap(content)]) }()
	content = append(content, keyFileHeader...)
	content = append(content, '\n')
	content = base64.StdEncoding.AppendEncode(content, key)
	content = append(content, '\n')

	dir := filepath.Dir(path)
	// CreateTemp opens with O_CREATE|O_EXCL and mode 0600.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("secretbox: create key file: %w", err)
	}
	tmpName := tmp.Name()
	defer func() {
		if rmErr := os.Remove(tmpName); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("secretbox: create key file: remove temporary file: %w", rmErr)
		}
	}()
	if err := writeSyncClose(tmp, content); err != nil {
		return fmt.Errorf("secretbox: create key file: %w", err)
	}
	// Link, unlike rename, fails if path exists: the first process to link
	// wins and everyone reads its key.
	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return fmt.Errorf("secretbox: create key file: %w", err)
	}
	if err := os.Remove(tmpName); err != nil {
		return fmt.Errorf("secretbox: create key file: remove temporary file: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("secretbox: create key file %s: sync directory: %w", path, err)
	}
	return nil
}

// writeSyncClose writes content to f, sets its mode to exactly 0600 (whatever
// the umask), syncs and closes it.
func writeSyncClose(f *os.File, content []byte) error {
	_, err := f.Write(content)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	return err
}

// syncDir makes a new directory entry durable. Windows cannot sync a
// directory, and does not need to.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	return err
}

// readKeyFile checks the mode of the open key file f and builds a Box from
// its keys.
func readKeyFile(f *os.File, path string) (*Box, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secretbox: key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secretbox: key file %s is not a regular file", path)
	}
	// Windows has no group and other permission bits (Go reports 0666 or
	// 0444); access there is governed by ACLs.
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return nil, fmt.Errorf("secretbox: key file %s has mode %04o, open to group or others; it must be readable by its owner only: chmod 600 %s", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	defer clear(data)
	if err != nil {
		return nil, fmt.Errorf("secretbox: read key file: %w", err)
	}
	if len(data) > maxKeyFileSize {
		return nil, fmt.Errorf("secretbox: key file %s is larger than %d bytes", path, maxKeyFileSize)
	}
	keys, lines, err := parseKeyFile(data)
	defer func() {
		for _, k := range keys {
			clear(k)
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("secretbox: key file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("secretbox: key file %s holds no key (only blank and # lines); remove it to have a new one created", path)
	}
	return newBox(keys, "key file "+path+": ", func(i int) string {
		return fmt.Sprintf("line %d", lines[i])
	})
}

// parseKeyFile returns the keys in data and the line number (from 1) of
// each. Errors start with "line N:" and never quote the line.
func parseKeyFile(data []byte) (keys [][]byte, lines []int, err error) {
	n := 0
	for line := range bytes.Lines(data) {
		n++
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		buf := make([]byte, base64.StdEncoding.DecodedLen(len(line)))
		m, err := base64.StdEncoding.Decode(buf, line)
		if err != nil {
			clear(buf)
			return keys, lines, fmt.Errorf("line %d: not a key: want the standard base64 encoding (with padding) of %d bytes", n, KeySize)
		}
		if m != KeySize {
			clear(buf)
			return keys, lines, fmt.Errorf("line %d: key is %d bytes, want %d", n, m, KeySize)
		}
		keys = append(keys, buf[:m])
		lines = append(lines, n)
	}
	return keys, lines, nil
}

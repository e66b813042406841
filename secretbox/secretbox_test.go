package secretbox_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idem-run/idem/secretbox"
)

// testKey returns a key of 32 copies of b.
func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, secretbox.KeySize) }

func mustNew(t *testing.T, keys ...[]byte) *secretbox.Box {
	t.Helper()
	b, err := secretbox.New(keys...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

func mustSeal(t *testing.T, b *secretbox.Box, plaintext, aad []byte) ([]byte, string) {
	t.Helper()
	ct, id, err := b.Seal(plaintext, aad)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return ct, id
}

func TestRoundTrip(t *testing.T) {
	b := mustNew(t, testKey(1))
	for _, tc := range []struct {
		name           string
		plaintext, aad []byte
	}{
		{"token", []byte(`{"token":"tok_live_abc"}`), []byte("org1/mint/key-1")},
		{"empty plaintext", []byte{}, []byte("org1/mint/key-2")},
		{"no aad", []byte("secret"), nil},
		{"large", bytes.Repeat([]byte("x"), 1<<16), []byte("aad")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, id := mustSeal(t, b, tc.plaintext, tc.aad)
			if id != b.KeyID() {
				t.Errorf("Seal key id = %q, want KeyID() %q", id, b.KeyID())
			}
			if got, want := len(ct), len(tc.plaintext)+secretbox.Overhead; got != want {
				t.Errorf("len(ciphertext) = %d, want %d", got, want)
			}
			if len(tc.plaintext) >= 8 && bytes.Contains(ct, tc.plaintext[:8]) {
				t.Errorf("ciphertext contains the plaintext")
			}
			got, err := b.Open(ct, tc.aad, id)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if !bytes.Equal(got, tc.plaintext) {
				t.Errorf("Open = %q, want %q", got, tc.plaintext)
			}
		})
	}
}

func TestOpenWrongAAD(t *testing.T) {
	b := mustNew(t, testKey(1))
	plaintext := []byte("tok_live_wrong_aad")
	ct, id := mustSeal(t, b, plaintext, []byte("org1/mint/key-1"))
	for _, aad := range [][]byte{[]byte("org1/mint/key-2"), []byte("org1/mint/key-1 "), nil} {
		got, err := b.Open(ct, aad, id)
		if !errors.Is(err, secretbox.ErrAuth) {
			t.Errorf("Open with aad %q: (%q, %v), want ErrAuth", aad, got, err)
			continue
		}
		if got != nil {
			t.Errorf("Open with aad %q returned %q along with its error", aad, got)
		}
		if strings.Contains(err.Error(), string(plaintext)) {
			t.Errorf("error %q contains the plaintext", err)
		}
	}
}

func TestOpenTampered(t *testing.T) {
	b := mustNew(t, testKey(1))
	plaintext := []byte("tok_live_tampered")
	aad := []byte("org1/mint/key-1")
	ct, id := mustSeal(t, b, plaintext, aad)
	orig := bytes.Clone(ct)

	// Flipping any single bit (nonce, body or tag) must be detected.
	for i := range ct {
		for bit := range 8 {
			tampered := bytes.Clone(ct)
			tampered[i] ^= 1 << bit
			if got, err := b.Open(tampered, aad, id); !errors.Is(err, secretbox.ErrAuth) {
				t.Fatalf("Open with byte %d bit %d flipped: (%q, %v), want ErrAuth", i, bit, got, err)
			} else if strings.Contains(err.Error(), string(plaintext)) {
				t.Fatalf("error %q contains the plaintext", err)
			}
		}
	}
	for _, tc := range []struct {
		name string
		ct   []byte
	}{
		{"truncated tag", ct[:len(ct)-1]},
		{"nonce and tag only", ct[:secretbox.Overhead]},
		{"shorter than nonce and tag", ct[:secretbox.Overhead-1]},
		{"nonce only", ct[:secretbox.NonceSize]},
		{"empty", nil},
		{"extended", append(bytes.Clone(ct), 0)},
	} {
		if got, err := b.Open(tc.ct, aad, id); !errors.Is(err, secretbox.ErrAuth) {
			t.Errorf("Open %s: (%q, %v), want ErrAuth", tc.name, got, err)
		}
	}
	if !bytes.Equal(ct, orig) {
		t.Errorf("Open modified its ciphertext argument")
	}
	if got, err := b.Open(ct, aad, id); err != nil || !bytes.Equal(got, plaintext) {
		t.Errorf("Open of the untouched ciphertext = (%q, %v), want (%q, nil)", got, err, plaintext)
	}
}

func TestOpenUnknownKeyID(t *testing.T) {
	b := mustNew(t, testKey(1))
	other := mustNew(t, testKey(2))
	aad := []byte("aad")
	ct, _ := mustSeal(t, b, []byte("secret"), aad)
	for _, id := range []string{other.KeyID(), "", "0000000000000000", strings.ToUpper(b.KeyID())} {
		if got, err := b.Open(ct, aad, id); !errors.Is(err, secretbox.ErrUnknownKey) {
			t.Errorf("Open with key id %q: (%q, %v), want ErrUnknownKey", id, got, err)
		}
	}
	// A ciphertext sealed by another key, presented under that key's id.
	ct2, id2 := mustSeal(t, other, []byte("secret"), aad)
	if _, err := b.Open(ct2, aad, id2); !errors.Is(err, secretbox.ErrUnknownKey) {
		t.Errorf("Open of another box's ciphertext: %v, want ErrUnknownKey", err)
	}
	// ... or under ours: authentication fails.
	if _, err := b.Open(ct2, aad, b.KeyID()); !errors.Is(err, secretbox.ErrAuth) {
		t.Errorf("Open of another key's ciphertext under our id: %v, want ErrAuth", err)
	}
}

func TestRotation(t *testing.T) {
	oldKey, newKey := testKey(1), testKey(2)
	oldBox := mustNew(t, oldKey)
	aad := []byte("org1/mint/key-1")
	oldCT, oldID := mustSeal(t, oldBox, []byte("sealed before rotation"), aad)

	rotated := mustNew(t, newKey, oldKey)
	if rotated.KeyID() == oldID {
		t.Fatalf("rotated box seals with the old key id %s", oldID)
	}
	if got, err := rotated.Open(oldCT, aad, oldID); err != nil || string(got) != "sealed before rotation" {
		t.Errorf("rotated Open(old ciphertext) = (%q, %v)", got, err)
	}
	newCT, newID := mustSeal(t, rotated, []byte("sealed after rotation"), aad)
	if newID != mustNew(t, newKey).KeyID() {
		t.Errorf("rotated box sealed with key id %s, want the new key's", newID)
	}
	if got, err := rotated.Open(newCT, aad, newID); err != nil || string(got) != "sealed after rotation" {
		t.Errorf("rotated Open(new ciphertext) = (%q, %v)", got, err)
	}
	// The old box cannot open what the new key sealed.
	if _, err := oldBox.Open(newCT, aad, newID); !errors.Is(err, secretbox.ErrUnknownKey) {
		t.Errorf("old box Open(new ciphertext): %v, want ErrUnknownKey", err)
	}
}

func TestSealNonceIsRandom(t *testing.T) {
	b := mustNew(t, testKey(1))
	plaintext, aad := []byte("same plaintext"), []byte("same aad")
	seen := make(map[string]bool)
	nonces := make(map[string]bool)
	for range 100 {
		ct, _ := mustSeal(t, b, plaintext, aad)
		if seen[string(ct)] {
			t.Fatalf("Seal returned the same ciphertext twice")
		}
		seen[string(ct)] = true
		nonces[string(ct[:secretbox.NonceSize])] = true
	}
	if len(nonces) != 100 {
		t.Errorf("100 seals used %d distinct nonces", len(nonces))
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys [][]byte
		want string
	}{
		{"no keys", nil, "no keys"},
		{"short key", [][]byte{testKey(1), make([]byte, 16)}, "key 1 is 16 bytes, want 32"},
		{"long key", [][]byte{make([]byte, 33)}, "key 0 is 33 bytes, want 32"},
		{"empty key", [][]byte{{}}, "key 0 is 0 bytes"},
		{"duplicate", [][]byte{testKey(1), testKey(2), testKey(1)}, "key 2 repeats key 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := secretbox.New(tc.keys...)
			if err == nil {
				t.Fatalf("New = %v, want an error", b)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New error %q does not contain %q", err, tc.want)
			}
			for _, k := range tc.keys {
				if len(k) > 0 && strings.Contains(err.Error(), hex.EncodeToString(k)) {
					t.Errorf("New error %q contains a key", err)
				}
			}
		})
	}
}

func TestKeyID(t *testing.T) {
	key := testKey(7)
	b := mustNew(t, key, testKey(8))
	sum := sha256.Sum256(key)
	if want := hex.EncodeToString(sum[:8]); b.KeyID() != want {
		t.Errorf("KeyID = %q, want %q", b.KeyID(), want)
	}
	if len(b.KeyID()) != 16 || strings.ToLower(b.KeyID()) != b.KeyID() {
		t.Errorf("KeyID %q is not 16 lower-case hex digits", b.KeyID())
	}
	if strings.Contains(b.KeyID(), hex.EncodeToString(key[:4])) {
		t.Errorf("KeyID %q shows key bytes", b.KeyID())
	}
}

// TestBoxPrintsNoKey guards against a Box that prints its keys if someone
// logs it.
func TestBoxPrintsNoKey(t *testing.T) {
	b := mustNew(t, testKey(0xab))
	for _, s := range []string{fmt.Sprintf("%v", b), fmt.Sprintf("%+v", b), fmt.Sprintf("%#v", b), fmt.Sprintf("%x", b)} {
		if strings.Contains(strings.ToLower(s), "abababab") {
			t.Errorf("printed Box shows key material: %s", s)
		}
	}
}

// Package secretbox seals one-time secret results (SPEC §6.5) with
// AES-256-GCM before they reach the store.
//
// A Box holds one or more 32-byte keys: the first seals, all of them open, so
// a key can be rotated by putting a new key first and keeping the old ones
// until the ciphertexts they sealed have expired. Each key is known by its id,
// the first 8 bytes of its SHA-256 in lower-case hex, which is stored next to
// the ciphertext and never reveals the key.
//
// A ciphertext is a random 96-bit nonce followed by the GCM output
// (encrypted plaintext and 16-byte tag); the caller's additional data (the
// record's identity) is authenticated but not stored, so a ciphertext moved to
// another record does not open.
//
// Servers get their Box from LoadOrCreateKeyFile, which keeps the keys in a
// file readable only by its owner.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/idem-run/idem"
)

const (
	// KeySize is the length of a key in bytes (AES-256).
	KeySize = 32
	// NonceSize is the length of the random nonce that starts a ciphertext.
	NonceSize = 12
	// Overhead is how much longer a ciphertext is than its plaintext: the
	// nonce and the GCM tag.
	Overhead = NonceSize + 16
)

// Errors returned by Open. Neither they nor any other error of this package
// contains key bytes or plaintext.
var (
	// ErrUnknownKey: the key id is not the id of any key of the Box (the key
	// was removed from the key file, or the id is not one of ours).
	ErrUnknownKey = errors.New("secretbox: unknown key id")
	// ErrAuth: the ciphertext failed authentication. It was tampered with or
	// truncated, or it is opened with other additional data than it was
	// sealed with.
	ErrAuth = errors.New("secretbox: ciphertext failed authentication")
)

var _ idem.Sealer = (*Box)(nil)

// Box seals with its first key and opens with any of its keys. Get one from
// New or LoadOrCreateKeyFile; the zero Box is not usable. It is safe for
// concurrent use, and keeps only the expanded AES keys, not the bytes it was
// given.
type Box struct {
	sealID string
	aeads  map[string]cipher.AEAD // by key id
}

// New returns a Box over keys, each exactly KeySize bytes: keys[0] seals, all
// of them open. Repeating a key is an error. New does not keep the slices;
// the caller may clear them afterwards.
func New(keys ...[]byte) (*Box, error) {
	return newBox(keys, "", func(i int) string { return fmt.Sprintf("key %d", i) })
}

// newBox builds a Box. Errors start with "secretbox: " and where, and name(i)
// says which key is at fault.
func newBox(keys [][]byte, where string, name func(i int) string) (*Box, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("secretbox: %sno keys", where)
	}
	b := &Box{aeads: make(map[string]cipher.AEAD, len(keys))}
	seen := make(map[string]int, len(keys))
	for i, key := range keys {
		if len(key) != KeySize {
			return nil, fmt.Errorf("secretbox: %s%s is %d bytes, want %d", where, name(i), len(key), KeySize)
		}
		id := keyID(key)
		if j, ok := seen[id]; ok {
			// Equal ids are equal keys, short of a 64-bit SHA-256 prefix
			// collision; either way the id could not tell them apart.
			return nil, fmt.Errorf("secretbox: %s%s repeats %s (key id %s)", where, name(i), name(j), id)
		}
		seen[id] = i
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("secretbox: %s%s: %w", where, name(i), err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("secretbox: %s%s: %w", where, name(i), err)
		}
		b.aeads[id] = aead
	}
	b.sealID = keyID(keys[0])
	return b, nil
}

// keyID is the first 8 bytes of SHA-256(key) in lower-case hex.
func keyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// KeyID returns the id of the key that seals.
func (b *Box) KeyID() string { return b.sealID }

// Seal encrypts plaintext with the sealing key, binding it to aad, and
// returns the ciphertext (a fresh random nonce followed by the GCM output)
// and the sealing key's id.
func (b *Box) Seal(plaintext, aad []byte) (ciphertext []byte, keyID string, err error) {
	aead := b.aeads[b.sealID]
	out := make([]byte, NonceSize, Overhead+len(plaintext))
	if _, err := rand.Read(out); err != nil {
		return nil, "", fmt.Errorf("secretbox: seal: read nonce: %w", err)
	}
	return aead.Seal(out, out[:NonceSize], plaintext, aad), b.sealID, nil
}

// Open decrypts a ciphertext returned by Seal under keyID with the same aad.
// It fails with ErrUnknownKey if the Box has no key with that id, and with
// ErrAuth if the ciphertext was altered or aad differs.
func (b *Box) Open(ciphertext, aad []byte, keyID string) ([]byte, error) {
	aead, ok := b.aeads[keyID]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownKey, keyID)
	}
	if len(ciphertext) < Overhead {
		return nil, fmt.Errorf("%w (key %s): %d bytes is shorter than nonce and tag", ErrAuth, keyID, len(ciphertext))
	}
	plaintext, err := aead.Open(nil, ciphertext[:NonceSize], ciphertext[NonceSize:], aad)
	if err != nil {
		return nil, fmt.Errorf("%w (key %s)", ErrAuth, keyID)
	}
	return plaintext, nil
}

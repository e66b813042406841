package idem

// Sealer encrypts one-time secret results before they reach the store
// (SPEC §6.5). secretbox.Box is the AES-256-GCM implementation.
type Sealer interface {
	// Seal encrypts plaintext, binding it to aad (the record's identity), and
	// returns the ciphertext and the id of the key used.
	Seal(plaintext, aad []byte) (ciphertext []byte, keyID string, err error)
	// Open decrypts what Seal returned with the same aad; it fails for
	// another aad, a tampered ciphertext or an unknown key id.
	Open(ciphertext, aad []byte, keyID string) ([]byte, error)
}

package secretbox_test

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idem-run/idem/secretbox"
)

func ExampleNew() {
	// Real keys come from LoadOrCreateKeyFile; these are for show.
	oldKey := bytes.Repeat([]byte{1}, secretbox.KeySize)
	newKey := bytes.Repeat([]byte{2}, secretbox.KeySize)

	before, err := secretbox.New(oldKey)
	if err != nil {
		log.Fatal(err)
	}
	// The record's identity is the additional data: the ciphertext opens
	// only for the record it was sealed for.
	aad := []byte("org_1/tokens.mint/key-7f3a")
	ciphertext, keyID, err := before.Seal([]byte("tok_live_4eC39HqLyjWDarjtT1zdp7dc"), aad)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sealed with key", keyID)

	// Rotation: the new key seals, the old one still opens.
	after, err := secretbox.New(newKey, oldKey)
	if err != nil {
		log.Fatal(err)
	}
	plaintext, err := after.Open(ciphertext, aad, keyID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("opened %s; now sealing with key %s\n", plaintext, after.KeyID())

	_, err = after.Open(ciphertext, []byte("org_1/tokens.mint/another-key"), keyID)
	fmt.Println(err)
	// Output:
	// sealed with key 72cd6e8422c407fb
	// opened tok_live_4eC39HqLyjWDarjtT1zdp7dc; now sealing with key 75877bb41d393b5f
	// secretbox: ciphertext failed authentication (key 72cd6e8422c407fb)
}

func ExampleLoadOrCreateKeyFile() {
	dir, err := os.MkdirTemp("", "idem-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "secret.key")

	// The first start creates the key file, later starts load it.
	first, err := secretbox.LoadOrCreateKeyFile(path)
	if err != nil {
		log.Fatal(err)
	}
	second, err := secretbox.LoadOrCreateKeyFile(path)
	if err != nil {
		log.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("mode:", fi.Mode().Perm())
	fmt.Println("same key:", first.KeyID() == second.KeyID())
	// Output:
	// mode: -rw-------
	// same key: true
}

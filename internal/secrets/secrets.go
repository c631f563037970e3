// Package secrets owns the control plane's secret key and the encryption of
// secret values at rest. A sealed value is "v1:<key id>:<base64(nonce|ciphertext)>",
// AES-256-GCM with associated data that binds it to the row and column it
// belongs to, so a sealed value copied into another row does not open.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeyFile is the name of the key file inside the data directory.
const KeyFile = "secret.key"

// KeySize is the length of the secret key in bytes.
const KeySize = 32

// Key encrypts and decrypts secret values. It is safe for concurrent use.
type Key struct {
	raw  []byte
	id   string
	aead cipher.AEAD
}

// NewKey wraps 32 raw key bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("secret key must be %d bytes, got %d", KeySize, len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	return &Key{raw: append([]byte(nil), raw...), id: hex.EncodeToString(sum[:4]), aead: aead}, nil
}

// ParseKey decodes a key written by Encode (standard base64 of 32 bytes).
func ParseKey(s string) (*Key, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("secret key is not base64: %w", err)
	}
	return NewKey(raw)
}

// GenerateKey returns a new random key.
func GenerateKey() *Key {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		panic(err)
	}
	k, _ := NewKey(raw)
	return k
}

// Load returns the key given in env (base64), or the key in
// dataDir/secret.key. Without either, the error is an os.ErrNotExist.
func Load(dataDir, env string) (*Key, error) {
	if env != "" {
		return ParseKey(env)
	}
	b, err := os.ReadFile(filepath.Join(dataDir, KeyFile))
	if err != nil {
		return nil, err
	}
	return ParseKey(string(b))
}

// LoadOrCreate is Load, creating dataDir/secret.key (mode 0600) on first
// use.
func LoadOrCreate(dataDir, env string) (*Key, error) {
	k, err := Load(dataDir, env)
	if !errors.Is(err, os.ErrNotExist) {
		return k, err
	}
	path := filepath.Join(dataDir, KeyFile)
	// Write the key to a temporary file, then link it into place: the key
	// file appears complete or not at all, and a concurrent first start
	// loses the link race and reads the winner's key.
	k = GenerateKey()
	tmp, err := os.CreateTemp(dataDir, ".secret.key-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, err
	}
	if _, err := tmp.WriteString(k.Encode() + "\n"); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return LoadOrCreate(dataDir, env)
		}
		return nil, err
	}
	return k, nil
}

// ID is a short fingerprint of the key, stored with every sealed value.
func (k *Key) ID() string { return k.id }

// Encode returns the key as base64, the form of the key file and of
// CAPSTAN_SECRET_KEY.
func (k *Key) Encode() string { return base64.StdEncoding.EncodeToString(k.raw) }

// Seal encrypts plaintext, bound to context (e.g. "users.totp_secret:usr_…").
func (k *Key) Seal(context string, plaintext []byte) string {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err)
	}
	ct := k.aead.Seal(nonce, nonce, plaintext, []byte(context))
	return "v1:" + k.id + ":" + base64.RawStdEncoding.EncodeToString(ct)
}

// ErrUndecryptable means a sealed value was made with another key, bound to
// another context, or altered.
var ErrUndecryptable = errors.New("secrets: value cannot be decrypted with this key")

// KeyMismatchError means a value, or a store, was sealed with another key
// than the one at hand: the remedy is to run with the key it was sealed
// with, not to retry. It is an ErrUndecryptable.
type KeyMismatchError struct {
	// Want is the id of the key the value or store was sealed with.
	Want string
	// Have is the id of the key at hand; "" when there is none yet.
	Have string
}

func (e *KeyMismatchError) Error() string {
	have := "there is no key"
	if e.Have != "" {
		have = "this key is " + e.Have
	}
	return fmt.Sprintf("%v: sealed with key %s, %s", ErrUndecryptable, e.Want, have)
}

// Is makes a KeyMismatchError match ErrUndecryptable.
func (e *KeyMismatchError) Is(target error) bool { return target == ErrUndecryptable }

// Open decrypts a value made by Seal with the same context.
func (k *Key) Open(context, sealed string) ([]byte, error) {
	parts := strings.SplitN(sealed, ":", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		return nil, ErrUndecryptable
	}
	if parts[1] != k.id {
		return nil, &KeyMismatchError{Want: parts[1], Have: k.id}
	}
	ct, err := base64.RawStdEncoding.DecodeString(parts[2])
	if err != nil || len(ct) < k.aead.NonceSize() {
		return nil, ErrUndecryptable
	}
	pt, err := k.aead.Open(nil, ct[:k.aead.NonceSize()], ct[k.aead.NonceSize():], []byte(context))
	if err != nil {
		return nil, ErrUndecryptable
	}
	return pt, nil
}

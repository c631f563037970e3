package secrets

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
)

// DerivedPassword is a password derived from the key for purpose (for
// example "db-console-reader:db_…"): every control plane that shares the
// key derives the same one, so it is never stored, and one purpose's
// password tells nothing of another's or of the key. It is 32
// characters of URL-safe base64 (192 bits).
func (k *Key) DerivedPassword(purpose string) string {
	b, err := hkdf.Key(sha256.New, k.raw, nil, "capstan derived password v1: "+purpose, 24)
	if err != nil {
		panic(err) // 24 bytes is always within HKDF-SHA256's limit
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

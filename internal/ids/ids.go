// Package ids makes the opaque, prefixed identifiers and secret tokens that
// Capstan hands out. Identifiers sort by creation time (a millisecond
// timestamp followed by randomness, monotonic within one process), so
// "newest first" is an index scan on the primary key.
package ids

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
)

// Prefixes of the identifiers, one per resource.
const (
	User      = "usr"
	Session   = "ses"
	Audit     = "aud"
	Server    = "srv"
	Job       = "job"
	Challenge = "chl"
)

var enc = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

var (
	mu   sync.Mutex
	last [16]byte
)

// New returns a new identifier "prefix_" followed by 26 lowercase Crockford
// base32 characters: 48 bits of Unix milliseconds and 80 bits that are random,
// or the previous value plus one when two ids fall in the same millisecond.
func New(prefix string) string {
	return NewAt(prefix, time.Now())
}

// NewAt is New with the time given.
func NewAt(prefix string, t time.Time) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint64(b[:8], ms<<16)
	mu.Lock()
	if binary.BigEndian.Uint64(last[:8])>>16 >= ms {
		// Same (or earlier) millisecond: continue from the last id so ids
		// stay strictly increasing within this process.
		b = last
		for i := 15; i >= 0; i-- {
			b[i]++
			if b[i] != 0 {
				break
			}
		}
	} else if _, err := rand.Read(b[6:]); err != nil {
		mu.Unlock()
		panic(err)
	}
	last = b
	mu.Unlock()
	return prefix + "_" + enc.EncodeToString(b[:])
}

// Token returns a new secret token "prefix_" followed by 256 random bits.
func Token(prefix string) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	if prefix == "" {
		return enc.EncodeToString(b[:])
	}
	return prefix + "_" + enc.EncodeToString(b[:])
}

// Hash returns the hex SHA-256 of a token, the only form in which tokens are
// stored. Tokens carry 256 random bits, so a fast hash is enough.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

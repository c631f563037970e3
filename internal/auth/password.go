package auth

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"

	"github.com/capstan-dev/capstan/internal/fault"
)

// Argon2id parameters. OWASP's password storage guidance (referenced by ASVS
// 5) sets m=19 MiB, t=2, p=1 as the floor; these meet it.
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonKeyLen    = 32
	argonSaltLen   = 16
)

// Password length bounds, in characters.
const (
	MinPasswordLen = 12
	MaxPasswordLen = 128
)

//go:embed common-passwords.txt
var commonPasswordsText string

// commonPasswords holds the 1,000 most common passwords, lowercased.
var commonPasswords = func() map[string]struct{} {
	m := make(map[string]struct{}, 1000)
	sc := bufio.NewScanner(strings.NewReader(commonPasswordsText))
	for sc.Scan() {
		if w := strings.TrimSpace(sc.Text()); w != "" {
			m[strings.ToLower(w)] = struct{}{}
		}
	}
	return m
}()

//go:embed leaked-passwords.bin
var leakedPasswords string

// leaked reports whether lower is one of the leaked passwords of
// MinPasswordLen characters or more: leakedPasswords holds the sorted
// first four bytes of the SHA-256 of each (about 12,000, 47 KiB, made by
// scripts/gen-leaked-passwords.sh). A password that is not in the list
// matches one of them by chance once in some 350,000.
func leaked(lower string) bool {
	h := sha256.Sum256([]byte(lower))
	want := binary.BigEndian.Uint32(h[:4])
	n := len(leakedPasswords) / 4
	i := sort.Search(n, func(i int) bool { return binary.BigEndian.Uint32([]byte(leakedPasswords[4*i:4*i+4])) >= want })
	return i < n && binary.BigEndian.Uint32([]byte(leakedPasswords[4*i:4*i+4])) == want
}

// ValidatePassword checks a new password against the rules: 12 to 128
// characters, not one of the leaked passwords of that length and not a
// variation of one of the most common shorter ones.
func ValidatePassword(field, pw, email string) error {
	n := utf8.RuneCountInString(pw)
	switch {
	case !utf8.ValidString(pw):
		return fault.Invalidf(field, "must be valid UTF-8")
	case n < MinPasswordLen:
		return fault.Invalidf(field, "must be at least %d characters", MinPasswordLen)
	case n > MaxPasswordLen:
		return fault.Invalidf(field, "must be at most %d characters", MaxPasswordLen)
	}
	lower := strings.ToLower(pw)
	if isCommon(lower) {
		return fault.Invalidf(field, "is one of the most commonly used passwords; choose another")
	}
	if email != "" && lower == strings.ToLower(email) {
		return fault.Invalidf(field, "must not be the e-mail address")
	}
	return nil
}

// isCommon reports whether lower is a leaked password, a common password,
// a common password padded with digits or symbols ("password1234",
// "123456789012"), or two common passwords joined ("qwertyqwerty"). Every
// common password is shorter than MinPasswordLen, so an exact match with
// one alone would never refuse a password that passes the length rule;
// the leaked ones are all at least that long.
func isCommon(lower string) bool {
	if _, ok := commonPasswords[lower]; ok || leaked(lower) {
		return true
	}
	for i := 1; i < len(lower); i++ {
		head, tail := lower[:i], lower[i:]
		_, h := commonPasswords[head]
		_, t := commonPasswords[tail]
		if (h && (t || padding(tail))) || (t && padding(head)) {
			return true
		}
	}
	return false
}

// padding reports whether s holds only digits, punctuation and symbols.
func padding(s string) bool {
	for _, r := range s {
		if !unicode.IsDigit(r) && !unicode.IsPunct(r) && !unicode.IsSymbol(r) {
			return false
		}
	}
	return true
}

// hashPassword returns the PHC string of an argon2id hash of pw.
func hashPassword(pw string) string {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		panic(err)
	}
	key := argon2.IDKey([]byte(pw), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemoryKiB, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

var errBadHash = errors.New("auth: malformed password hash")

// checkPassword reports whether pw matches the PHC string. It reads the
// parameters from the hash, so hashes made with older parameters still verify.
func checkPassword(phc, pw string) (bool, error) {
	parts := strings.Split(phc, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errBadHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, errBadHash
	}
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || t == 0 || p == 0 {
		return false, errBadHash
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return false, errBadHash
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false, errBadHash
	}
	got := argon2.IDKey([]byte(pw), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// dummyHash is checked against when an account does not exist, so that the
// response takes as long as for a real account. It is made at the first
// sign-in, not at start: hashing takes 19 MiB, which a process that never
// signs anyone in (or not yet) should not hold.
var dummyHash = sync.OnceValue(func() string { return hashPassword("capstan-timing-equaliser-not-a-password") })

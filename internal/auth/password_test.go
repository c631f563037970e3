package auth

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/crypto/argon2"

	"github.com/capstan-dev/capstan/internal/fault"
)

func TestPasswordHashRoundTrip(t *testing.T) {
	h := hashPassword("correct horse battery staple")
	if got, want := strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$"), true; got != want {
		t.Fatalf("PHC string %q: got prefix match %v, want %v", h, got, want)
	}
	parts := strings.Split(h, "$")
	if got, want := len(parts), 6; got != want {
		t.Fatalf("PHC parts: got %d, want %d", got, want)
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		t.Fatalf("salt: %v", err)
	}
	if got, want := len(salt), argonSaltLen; got != want {
		t.Fatalf("salt length: got %d, want %d", got, want)
	}
	key, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil {
		t.Fatalf("key: %v", err)
	}
	if got, want := len(key), argonKeyLen; got != want {
		t.Fatalf("key length: got %d, want %d", got, want)
	}

	for _, c := range []struct {
		pw   string
		want bool
	}{
		{"correct horse battery staple", true},
		{"correct horse battery staplE", false},
		{"", false},
	} {
		ok, err := checkPassword(h, c.pw)
		if err != nil {
			t.Fatalf("check %q: %v", c.pw, err)
		}
		if got := ok; got != c.want {
			t.Fatalf("check %q: got %v, want %v", c.pw, got, c.want)
		}
	}
	if got, want := hashPassword("correct horse battery staple") != h, true; got != want {
		t.Fatalf("two hashes of one password differ (salted): got %v, want %v", got, want)
	}
}

func TestCheckPasswordReadsParametersFromHash(t *testing.T) {
	salt := []byte("0123456789abcdef")
	key := argon2.IDKey([]byte("an older password"), salt, 1, 8*1024, 2, 16)
	phc := fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, 8*1024, 1, 2,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
	ok, err := checkPassword(phc, "an older password")
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	if got, want := ok, true; got != want {
		t.Fatalf("older parameters: got %v, want %v", got, want)
	}
}

func TestCheckPasswordMalformed(t *testing.T) {
	good := hashPassword("correct horse battery staple")
	parts := strings.Split(good, "$")
	for _, phc := range []string{
		"",
		"plaintext",
		strings.Replace(good, "argon2id", "argon2i", 1),
		strings.Replace(good, "v=19", "v=16", 1),
		strings.Replace(good, "m=19456", "m=0", 1),
		strings.Replace(good, "t=2", "t=x", 1),
		"$argon2id$v=19$m=19456,t=2,p=1$!!$" + parts[5],
		"$argon2id$v=19$m=19456,t=2,p=1$" + parts[4] + "$",
		good + "$extra",
	} {
		ok, err := checkPassword(phc, "correct horse battery staple")
		if got, want := err, errBadHash; got != want {
			t.Fatalf("check against %q: got %v, %v, want error %v", phc, ok, got, want)
		}
	}
}

func TestValidatePassword(t *testing.T) {
	if got, want := len(commonPasswords), 1000; got != want {
		t.Fatalf("common passwords loaded: got %d, want %d", got, want)
	}
	// The shipped list has no entry long enough to pass the length rule, so
	// plant one to check that the lookup ignores case.
	commonPasswords["correcthorsebattery"] = struct{}{}
	t.Cleanup(func() { delete(commonPasswords, "correcthorsebattery") })

	for _, c := range []struct {
		pw    string
		valid bool
	}{
		{strings.Repeat("x", MinPasswordLen-1), false},
		{strings.Repeat("x", MinPasswordLen), true},
		{strings.Repeat("é", MinPasswordLen), true}, // characters, not bytes
		{strings.Repeat("é", MinPasswordLen-1), false},
		{strings.Repeat("x", MaxPasswordLen), true},
		{strings.Repeat("x", MaxPasswordLen+1), false},
		{"abcdefghijk\xff", false},
		{"correcthorsebattery", false},
		{"CorrectHorseBattery", false},
		{"alice@example.com", false},
		{"ALICE@example.COM", false},
		{"alice@example.com!", true},
	} {
		err := ValidatePassword("password", c.pw, "alice@example.com")
		if got, want := err == nil, c.valid; got != want {
			t.Fatalf("validate %q: got valid %v (%v), want %v", c.pw, got, err, want)
		}
		if err == nil {
			continue
		}
		fe := fault.As(err)
		if fe == nil || fe.Kind != fault.Invalid || len(fe.Fields) != 1 {
			t.Fatalf("validate %q: got %#v, want one Invalid field", c.pw, err)
		}
		if got, want := fe.Fields[0].Field, "password"; got != want {
			t.Fatalf("validate %q: got field %q, want %q", c.pw, got, want)
		}
	}
}

// TestLeakedPasswords: leaked passwords of 12 characters or more are
// refused, in any case, though no common shorter password explains them.
func TestLeakedPasswords(t *testing.T) {
	if got := len(leakedPasswords) / 4; got < 10000 {
		t.Fatalf("leaked passwords loaded: got %d, want at least 10,000", got)
	}
	for _, pw := range []string{"leavemealone", "sonyericsson", "finalfantasy", "justinbieber", "CounterStrike", "supernatural", "mailcreated5240", "1qaz2wsx3edc"} {
		if err := ValidatePassword("password", pw, ""); err == nil {
			t.Fatalf("validate %q: valid, want refused as leaked", pw)
		}
	}
	for _, pw := range []string{"correct horse battery staple", "a long and unusual passphrase", "Tr0ub4dor&3 of the staple kind"} {
		if err := ValidatePassword("password", pw, ""); err != nil {
			t.Fatalf("validate %q: %v, want valid", pw, err)
		}
	}
}

package secrets

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpenRoundTrip(t *testing.T) {
	k := GenerateKey()
	for _, pt := range []string{"", "JBSWY3DPEHPK3PXP", strings.Repeat("x", 10_000)} {
		sealed := k.Seal("users.totp_secret:usr_1", []byte(pt))
		if got, want := strings.HasPrefix(sealed, "v1:"+k.ID()+":"), true; got != want {
			t.Fatalf("sealed %q has the v1 key prefix: got %v, want %v", sealed, got, want)
		}
		if pt != "" && strings.Contains(sealed, pt) {
			t.Fatalf("sealed value holds the plaintext")
		}
		got, err := k.Open("users.totp_secret:usr_1", sealed)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if got, want := string(got), pt; got != want {
			t.Fatalf("round trip: got %q, want %q", got, want)
		}
	}
	if a, b := k.Seal("c", []byte("same")), k.Seal("c", []byte("same")); a == b {
		t.Fatalf("two seals of the same value are equal (%s), want fresh nonces", a)
	}
}

func TestOpenRefuses(t *testing.T) {
	k := GenerateKey()
	sealed := k.Seal("users.totp_secret:usr_1", []byte("secret"))
	prefix := "v1:" + k.ID() + ":"
	ct, err := base64.RawStdEncoding.DecodeString(strings.TrimPrefix(sealed, prefix))
	if err != nil {
		t.Fatalf("sealed body: %v", err)
	}
	ct[len(ct)-1] ^= 1
	tampered := prefix + base64.RawStdEncoding.EncodeToString(ct)
	for _, c := range []struct {
		name, context, sealed string
		key                   *Key
	}{
		{"wrong context", "users.totp_secret:usr_2", sealed, k},
		{"other key", "users.totp_secret:usr_1", sealed, GenerateKey()},
		{"tampered", "users.totp_secret:usr_1", tampered, k},
		{"truncated", "users.totp_secret:usr_1", sealed[:len(sealed)-4], k},
		{"not sealed", "users.totp_secret:usr_1", "secret", k},
		{"other version", "users.totp_secret:usr_1", "v2" + sealed[2:], k},
		{"not base64", "users.totp_secret:usr_1", "v1:" + k.ID() + ":!!!", k},
		{"too short", "users.totp_secret:usr_1", "v1:" + k.ID() + ":AAAA", k},
	} {
		_, err := c.key.Open(c.context, c.sealed)
		if got, want := errors.Is(err, ErrUndecryptable), true; got != want {
			t.Fatalf("%s: got error %v, want ErrUndecryptable", c.name, err)
		}
	}
}

func TestKeyEncoding(t *testing.T) {
	k := GenerateKey()
	back, err := ParseKey(" " + k.Encode() + "\n")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if got, want := back.ID(), k.ID(); got != want {
		t.Fatalf("parsed key id: got %q, want %q", got, want)
	}
	if got, want := GenerateKey().ID() != k.ID(), true; got != want {
		t.Fatalf("two generated keys differ: got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "not base64!", "AAAA"} {
		if _, err := ParseKey(bad); err == nil {
			t.Fatalf("parse %q: got no error, want one", bad)
		}
	}
	if _, err := NewKey(make([]byte, 16)); err == nil {
		t.Fatalf("16-byte key: got no error, want one")
	}
}

func TestLoadOrCreate(t *testing.T) {
	dir := t.TempDir()
	k, err := LoadOrCreate(dir, "")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	path := filepath.Join(dir, KeyFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("key file: %v", err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Fatalf("key file mode: got %v, want %v", got, want)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), k.Encode()+"\n"; got != want {
		t.Fatalf("key file contents: got %q, want %q", got, want)
	}

	again, err := LoadOrCreate(dir, "")
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got, want := again.Encode(), k.Encode(); got != want {
		t.Fatalf("reloaded key: got %q, want %q", got, want)
	}
	sealed := k.Seal("c", []byte("v"))
	if _, err := again.Open("c", sealed); err != nil {
		t.Fatalf("open with the reloaded key: %v", err)
	}

	// The environment wins over the file, and does not touch it.
	env := GenerateKey()
	fromEnv, err := LoadOrCreate(dir, env.Encode())
	if err != nil {
		t.Fatalf("load from env: %v", err)
	}
	if got, want := fromEnv.Encode(), env.Encode(); got != want {
		t.Fatalf("key from env: got %q, want %q", got, want)
	}
	b2, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b2), string(b); got != want {
		t.Fatalf("key file after env load: got %q, want %q", got, want)
	}
	if _, err := LoadOrCreate(dir, "not a key"); err == nil {
		t.Fatalf("bad env key: got no error, want one")
	}

	// An env key never creates a file.
	empty := t.TempDir()
	if _, err := LoadOrCreate(empty, env.Encode()); err != nil {
		t.Fatalf("load from env into empty dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(empty, KeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("key file with env key: got %v, want it not to exist", err)
	}

	// A corrupt key file is an error, not silently replaced.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, KeyFile), []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(bad, ""); err == nil {
		t.Fatalf("corrupt key file: got no error, want one")
	}
}

// A value sealed with another key is a KeyMismatchError naming both key
// ids, and still an ErrUndecryptable; a value of this key that does not
// open is not a mismatch.
func TestOpenOtherKeyIsMismatch(t *testing.T) {
	k, other := GenerateKey(), GenerateKey()
	_, err := other.Open("c", k.Seal("c", []byte("secret")))
	var km *KeyMismatchError
	if !errors.As(err, &km) {
		t.Fatalf("open with another key: got %v, want a KeyMismatchError", err)
	}
	if km.Want != k.ID() || km.Have != other.ID() {
		t.Fatalf("mismatch: got want %q have %q, want want %q have %q", km.Want, km.Have, k.ID(), other.ID())
	}
	if !errors.Is(err, ErrUndecryptable) {
		t.Fatalf("mismatch %v is not ErrUndecryptable", err)
	}
	if _, err := k.Open("other context", k.Seal("c", []byte("secret"))); errors.As(err, &km) {
		t.Fatalf("wrong context: got a KeyMismatchError %v, want a plain ErrUndecryptable", err)
	}
}

// Load reads the key but never creates one.
func TestLoadCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir, ""); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("load from an empty dir: got %v, want os.ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Join(dir, KeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("key file after Load: %v, want none", err)
	}
	k := GenerateKey()
	got, err := Load(dir, k.Encode())
	if err != nil || got.ID() != k.ID() {
		t.Fatalf("load from env: got %v, %v, want key %s", got, err, k.ID())
	}
	made, err := LoadOrCreate(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Load(dir, ""); err != nil || got.ID() != made.ID() {
		t.Fatalf("load after LoadOrCreate: got %v, %v, want key %s", got, err, made.ID())
	}
}

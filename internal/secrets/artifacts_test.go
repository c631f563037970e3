package secrets

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
)

// TestArtifactIdentity: the identity is the same for the same key (so
// replicas and a restored control plane agree), differs between keys,
// and decrypts what was encrypted to its recipient.
func TestArtifactIdentity(t *testing.T) {
	k := GenerateKey()
	same, err := ParseKey(k.Encode())
	if err != nil {
		t.Fatal(err)
	}
	id := k.ArtifactIdentity()
	if got, want := same.ArtifactIdentity().String(), id.String(); got != want {
		t.Fatalf("same key, identities %s and %s", got, want)
	}
	if GenerateKey().ArtifactIdentity().String() == id.String() {
		t.Fatal("two keys derive the same identity")
	}
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, same.ArtifactIdentity().Recipient())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "marker row"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := age.Decrypt(&buf, id)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(r); string(b) != "marker row" {
		t.Fatalf("decrypted %q", b)
	}
}

// TestBech32 checks the encoder against BIP 173's valid test vectors;
// TestArtifactIdentity checks that age's parser (which verifies the
// checksum) takes what it encodes.
func TestBech32(t *testing.T) {
	for hrp, want := range map[string]string{
		"a": "a12uel5l",
		"?": "?1ezyfcl",
		"an83characterlonghumanreadablepartthatcontainsthenumber1andtheexcludedcharactersbio": "an83characterlonghumanreadablepartthatcontainsthenumber1andtheexcludedcharactersbio1tt5tgs",
	} {
		got, err := bech32Encode(hrp, nil)
		if err != nil || got != want {
			t.Errorf("bech32Encode(%q) = %q, %v; want %q", hrp, got, err, want)
		}
	}
	if _, err := bech32Encode("UPPER", nil); err == nil {
		t.Error("an uppercase human-readable part was encoded")
	}
}

// TestWriteArtifactIdentity: the file is 0600, holds the identity age
// parses, and is left alone when it is up to date.
func TestWriteArtifactIdentity(t *testing.T) {
	dir := t.TempDir()
	k := GenerateKey()
	if err := k.WriteArtifactIdentity(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, ArtifactIdentityFile)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids, err := age.ParseIdentities(f)
	if err != nil || len(ids) != 1 || ids[0].(*age.X25519Identity).String() != k.ArtifactIdentity().String() {
		t.Fatalf("identity file: %v %v", ids, err)
	}
	if err := k.WriteArtifactIdentity(dir); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || strings.HasPrefix(entries[0].Name(), ".") {
		t.Fatalf("data dir after a second write: %v", entries)
	}
}

// TestInstanceIdentity: an instance's identity is the same for the same
// key and instance, differs between instances, from the fleet-wide
// identity and between keys, and is what its key id names. The derivation
// is pinned by a known answer: an identity that changed would leave every
// backup made before unreadable.
func TestInstanceIdentity(t *testing.T) {
	k := GenerateKey()
	same, err := ParseKey(k.Encode())
	if err != nil {
		t.Fatal(err)
	}
	a, b := k.InstanceIdentity("db_a"), k.InstanceIdentity("db_b")
	if got, want := same.InstanceIdentity("db_a").String(), a.String(); got != want {
		t.Fatalf("same key and instance, identities %s and %s", got, want)
	}
	for name, other := range map[string]string{"another instance": b.String(), "the fleet": k.ArtifactIdentity().String(),
		"another key": GenerateKey().InstanceIdentity("db_a").String()} {
		if other == a.String() {
			t.Errorf("instance db_a and %s have the same identity", name)
		}
	}
	for keyID, want := range map[string]string{InstanceKeyID("db_a"): a.String(), KeyIDFleet: k.ArtifactIdentity().String()} {
		got, err := k.IdentityOf(keyID)
		if err != nil || got.String() != want {
			t.Errorf("IdentityOf(%q) = %v, %v; want %s", keyID, got, err, want)
		}
	}
	for _, bad := range []string{"", "inst-v1:", "inst-v2:db_a", "fleet-v2"} {
		if _, err := k.IdentityOf(bad); err == nil {
			t.Errorf("IdentityOf(%q) took it", bad)
		}
	}
	if id, ok := InstanceOfKeyID(InstanceKeyID("db_a")); !ok || id != "db_a" {
		t.Errorf("InstanceOfKeyID: %q, %v", id, ok)
	}

	// Known answer: the key of 32 bytes 0x00…0x1f and instance db_test.
	raw := make([]byte, KeySize)
	for i := range raw {
		raw[i] = byte(i)
	}
	fixed, err := NewKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fixed.InstanceIdentity("db_test").Recipient().String(), knownInstanceRecipient; got != want {
		t.Errorf("recipient of db_test: %s, want %s", got, want)
	}
}

// knownInstanceRecipient was computed apart from this package (HKDF-SHA256
// per RFC 5869 and X25519 from Python's cryptography package).
const knownInstanceRecipient = "age1sfuhqd874m6hrm8ajdvalqvu4yymwklfu7yrdcch3yjfw3q9x9gqmnax2y"

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

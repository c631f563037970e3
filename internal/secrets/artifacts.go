package secrets

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"
)

// ArtifactIdentityFile is the name, inside the data directory, of the file
// that holds the artifact identity in age's identity file format, so an
// operator can decrypt an artifact file with the age command line alone.
const ArtifactIdentityFile = "artifacts.agekey"

// artifactInfo separates the artifact identity from any other key derived
// from the secret key.
const artifactInfo = "capstan artifacts age-x25519 v1"

// ArtifactIdentity returns the fleet-wide age X25519 identity: the one
// that backups and database artifacts made before per-instance keys were
// encrypted to (key id KeyIDFleet). It is derived from the key
// (HKDF-SHA256), so every control-plane replica that shares the key agrees
// on it, and a control plane restored with the key from a recovery kit
// reads what was made before. It never goes to a server.
func (k *Key) ArtifactIdentity() *age.X25519Identity {
	scalar, err := hkdf.Key(sha256.New, k.raw, nil, artifactInfo, 32)
	if err != nil {
		panic(err) // 32 bytes of SHA-256 output is always within HKDF's limit
	}
	return x25519Identity(scalar)
}

// Key ids name the identity an encrypted backup or database artifact was
// made for, as its record keeps it, so that a scheme can change without
// guessing which identity opens what.
const (
	// KeyIDFleet is the fleet-wide ArtifactIdentity.
	KeyIDFleet = "fleet-v1"
	// instanceKeyIDPrefix starts the key id of an instance's identity
	// (InstanceIdentity), followed by the instance id.
	instanceKeyIDPrefix = "inst-v1:"
)

// instanceSalt is HKDF's salt for instance identities: it keeps them
// apart from every other key derived from the secret key, whatever the
// instance id.
const instanceSalt = "capstan database instance age-x25519 v1"

// InstanceKeyID is the key id of instanceID's identity.
func InstanceKeyID(instanceID string) string { return instanceKeyIDPrefix + instanceID }

// InstanceOfKeyID returns the instance whose identity keyID names; false
// if keyID names no instance's identity.
func InstanceOfKeyID(keyID string) (string, bool) {
	id, ok := strings.CutPrefix(keyID, instanceKeyIDPrefix)
	return id, ok && id != ""
}

// InstanceIdentity returns the age X25519 identity of one database
// instance: its backups, exports and imports are encrypted to its
// recipient, and a server verifying or restoring one of its backups
// receives this identity and no other. The scalar is HKDF-SHA256 of the
// secret key with instanceSalt as salt and the instance id as info, so
// the secret key (which a recovery kit holds) derives every instance's
// identity, and one instance's identity says nothing of another's.
func (k *Key) InstanceIdentity(instanceID string) *age.X25519Identity {
	scalar, err := hkdf.Key(sha256.New, k.raw, []byte(instanceSalt), instanceID, 32)
	if err != nil {
		panic(err) // 32 bytes of SHA-256 output is always within HKDF's limit
	}
	return x25519Identity(scalar)
}

// IdentityOf returns the identity keyID names: KeyIDFleet, or an
// instance's (InstanceKeyID).
func (k *Key) IdentityOf(keyID string) (*age.X25519Identity, error) {
	if keyID == KeyIDFleet {
		return k.ArtifactIdentity(), nil
	}
	if id, ok := InstanceOfKeyID(keyID); ok {
		return k.InstanceIdentity(id), nil
	}
	return nil, fmt.Errorf("unknown key id %q", keyID)
}

// x25519Identity makes an age identity of a 32-byte scalar.
func x25519Identity(scalar []byte) *age.X25519Identity {
	s, err := bech32Encode("age-secret-key-", scalar)
	if err != nil {
		panic(err)
	}
	id, err := age.ParseX25519Identity(strings.ToUpper(s))
	if err != nil {
		panic(err) // any 32 bytes are an X25519 scalar
	}
	return id
}

// WriteArtifactIdentity writes the artifact identity to
// dataDir/ArtifactIdentityFile (mode 0600) unless the file holds it
// already. The file is a copy for operators: the control plane always
// derives the identity from the key.
func (k *Key) WriteArtifactIdentity(dataDir string) error {
	id := k.ArtifactIdentity()
	content := fmt.Sprintf("# Capstan artifact identity, derived from secret key %s.\n"+
		"# Decrypts the backups and database exports made before per-instance keys (key id fleet-v1):\n"+
		"#   age -d -i %s FILE.age > FILE.sql.gz\n"+
		"# Newer ones are encrypted to their instance's identity: capstan recovery-kit identity.\n"+
		"# public key: %s\n%s\n", k.id, ArtifactIdentityFile, id.Recipient(), id)
	path := filepath.Join(dataDir, ArtifactIdentityFile)
	if b, err := os.ReadFile(path); err == nil && string(b) == content {
		return nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	tmp, err := os.CreateTemp(dataDir, ".artifacts.agekey-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// bech32Encode encodes data as bech32 (BIP 173) with the human-readable
// part hrp, as age encodes its keys.
func bech32Encode(hrp string, data []byte) (string, error) {
	const charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
	// Regroup 8-bit bytes into 5-bit groups, padding the last.
	var values []byte
	acc, bits := uint32(0), uint(0)
	for _, b := range data {
		acc = acc<<8 | uint32(b)
		bits += 8
		for bits >= 5 {
			bits -= 5
			values = append(values, byte(acc>>bits)&31)
		}
	}
	if bits > 0 {
		values = append(values, byte(acc<<(5-bits))&31)
	}
	for i := 0; i < len(hrp); i++ {
		if hrp[i] < 33 || hrp[i] > 126 || 'A' <= hrp[i] && hrp[i] <= 'Z' {
			return "", fmt.Errorf("bech32: invalid human-readable part %q", hrp)
		}
	}
	expanded := make([]byte, 0, 2*len(hrp)+1+len(values)+6)
	for i := 0; i < len(hrp); i++ {
		expanded = append(expanded, hrp[i]>>5)
	}
	expanded = append(expanded, 0)
	for i := 0; i < len(hrp); i++ {
		expanded = append(expanded, hrp[i]&31)
	}
	expanded = append(expanded, values...)
	expanded = append(expanded, 0, 0, 0, 0, 0, 0)
	mod := bech32Polymod(expanded) ^ 1
	for i := 0; i < 6; i++ {
		values = append(values, byte(mod>>uint(5*(5-i)))&31)
	}
	var sb strings.Builder
	sb.WriteString(hrp)
	sb.WriteByte('1')
	for _, v := range values {
		sb.WriteByte(charset[v])
	}
	return sb.String(), nil
}

func bech32Polymod(values []byte) uint32 {
	gen := [5]uint32{0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3}
	chk := uint32(1)
	for _, v := range values {
		top := chk >> 25
		chk = (chk&0x1ffffff)<<5 ^ uint32(v)
		for i := 0; i < 5; i++ {
			if (top>>uint(i))&1 == 1 {
				chk ^= gen[i]
			}
		}
	}
	return chk
}

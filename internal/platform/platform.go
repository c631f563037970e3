// Package platform describes this control plane (name, URL, versions,
// schema), answers health checks, and makes and opens recovery kits: the
// password-encrypted file that holds what is needed to decrypt this control
// plane's secrets and artifacts.
package platform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"filippo.io/age"

	"github.com/capstan-dev/capstan/internal/secrets"
)

// Name is the product name shown by the platform endpoint.
const Name = "Capstan"

// Protocol versions served by this build.
const (
	APIVersion           = "v1"
	AgentProtocolVersion = "v1"
)

// Store is what the platform needs of the persistence layer.
type Store interface {
	Ping(ctx context.Context) error
	SchemaVersion(ctx context.Context) (current, latest int64, err error)
	DialectName() string
}

// Schema describes the database schema in use.
type Schema struct {
	Dialect string `json:"dialect" enum:"sqlite,postgres" doc:"Database engine of the control plane's store"`
	Version int64  `json:"version" doc:"Applied schema migration version"`
}

// Info is the platform description.
type Info struct {
	Name          string `json:"name"`
	PublicURL     string `json:"public_url" doc:"URL that agents and browsers use to reach this control plane"`
	Version       string `json:"version" doc:"Control plane build version"`
	AgentProtocol string `json:"agent_protocol" doc:"Agent protocol version served under /agent/<version>"`
	API           string `json:"api" doc:"Client API version served under /api/<version>"`
	Schema        Schema `json:"schema"`
}

// Service answers platform questions.
type Service struct {
	store     Store
	key       *secrets.Key
	publicURL string
	version   string
	now       func() time.Time
}

// NewService returns a platform service.
func NewService(store Store, key *secrets.Key, publicURL, version string, now func() time.Time) *Service {
	return &Service{store: store, key: key, publicURL: publicURL, version: version, now: now}
}

// PublicURL returns the configured public URL.
func (s *Service) PublicURL() string { return s.publicURL }

// Info describes this control plane.
func (s *Service) Info(ctx context.Context) (Info, error) {
	cur, _, err := s.store.SchemaVersion(ctx)
	if err != nil {
		return Info{}, err
	}
	return Info{Name: Name, PublicURL: s.publicURL, Version: s.version, AgentProtocol: AgentProtocolVersion,
		API: APIVersion, Schema: Schema{Dialect: s.store.DialectName(), Version: cur}}, nil
}

// Health reports whether the store answers.
func (s *Service) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.store.Ping(ctx)
}

// KitFormat identifies the recovery kit's JSON payload.
const KitFormat = "capstan-recovery-kit/1"

// Kit is the content of a recovery kit.
type Kit struct {
	Format    string    `json:"format"`
	CreatedAt time.Time `json:"created_at"`
	PublicURL string    `json:"public_url"`
	Version   string    `json:"version"`
	// SecretKey is the base64 secret key (CAPSTAN_SECRET_KEY form).
	SecretKey   string `json:"secret_key"`
	SecretKeyID string `json:"secret_key_id"`
	Schema      Schema `json:"schema"`
	// ArtifactIdentity is the fleet-wide age identity that backups and
	// database exports made before per-instance keys are encrypted to
	// (key id fleet-v1; derived from SecretKey, written out so such a
	// file can be decrypted with the age tool alone). Empty in kits made
	// before exports existed. Newer backups and exports are encrypted to
	// their instance's identity, which SecretKey derives (Identity).
	ArtifactIdentity string `json:"artifact_identity,omitempty"`
}

// Identity returns the age identity that the key id of a backup or an
// export names ("inst-v1:<instance id>" or "fleet-v1"), derived from the
// kit's secret key: the kit alone decrypts every backup.
func (k Kit) Identity(keyID string) (*age.X25519Identity, error) {
	key, err := secrets.ParseKey(k.SecretKey)
	if err != nil {
		return nil, fmt.Errorf("recovery kit holds an invalid key: %w", err)
	}
	return key.IdentityOf(keyID)
}

// RecoveryKit returns a kit encrypted with password (age, scrypt recipient).
func (s *Service) RecoveryKit(ctx context.Context, password string) ([]byte, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	kit := Kit{Format: KitFormat, CreatedAt: s.now().UTC(), PublicURL: s.publicURL, Version: s.version,
		SecretKey: s.key.Encode(), SecretKeyID: s.key.ID(), Schema: info.Schema, ArtifactIdentity: s.key.ArtifactIdentity().String()}
	plain, err := json.MarshalIndent(kit, "", "  ")
	if err != nil {
		return nil, err
	}
	r, err := age.NewScryptRecipient(password)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, r)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(plain); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ErrWrongKitPassword means the password does not open the kit.
var ErrWrongKitPassword = errors.New("the password does not open this recovery kit")

// OpenRecoveryKit decrypts and parses a kit.
func OpenRecoveryKit(r io.Reader, password string) (Kit, error) {
	id, err := age.NewScryptIdentity(password)
	if err != nil {
		return Kit{}, err
	}
	dec, err := age.Decrypt(r, id)
	if err != nil {
		var noMatch *age.NoIdentityMatchError
		if errors.As(err, &noMatch) {
			return Kit{}, ErrWrongKitPassword
		}
		return Kit{}, fmt.Errorf("not a recovery kit: %w", err)
	}
	var kit Kit
	if err := json.NewDecoder(io.LimitReader(dec, 1<<20)).Decode(&kit); err != nil {
		return Kit{}, fmt.Errorf("recovery kit content: %w", err)
	}
	if kit.Format != KitFormat {
		return Kit{}, fmt.Errorf("unknown recovery kit format %q", kit.Format)
	}
	key, err := secrets.ParseKey(kit.SecretKey)
	if err != nil {
		return Kit{}, fmt.Errorf("recovery kit holds an invalid key: %w", err)
	}
	if kit.ArtifactIdentity != "" && kit.ArtifactIdentity != key.ArtifactIdentity().String() {
		return Kit{}, errors.New("recovery kit's artifact identity is not its secret key's")
	}
	return kit, nil
}

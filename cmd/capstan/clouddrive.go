package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/capstan-dev/capstan/internal/clouddrive"
)

// cloudDriveFlags configure the OAuth client the cloud drive for backups
// is connected through. The client secret comes from the environment
// (CAPSTAN_CLOUDDRIVE_CLIENT_SECRET) or a file, never from a flag's
// value, which other users of the host can read in the process list.
type cloudDriveFlags struct {
	CloudDriveClientID   string `name:"clouddrive-client-id" env:"CAPSTAN_CLOUDDRIVE_CLIENT_ID" help:"OAuth client id for the cloud drive (Google Drive) that backups are stored in; see the README. Its secret comes from CAPSTAN_CLOUDDRIVE_CLIENT_SECRET or --clouddrive-client-secret-file."`
	CloudDriveSecretFile string `name:"clouddrive-client-secret-file" env:"CAPSTAN_CLOUDDRIVE_CLIENT_SECRET_FILE" help:"File holding the OAuth client secret of the cloud drive (instead of CAPSTAN_CLOUDDRIVE_CLIENT_SECRET)."`
	CloudDriveAuthURL    string `name:"clouddrive-auth-url" env:"CAPSTAN_CLOUDDRIVE_AUTH_URL" default:"https://accounts.google.com/o/oauth2/v2/auth" help:"The cloud drive provider's OAuth authorization (consent) endpoint."`
	CloudDriveTokenURL   string `name:"clouddrive-token-url" env:"CAPSTAN_CLOUDDRIVE_TOKEN_URL" default:"https://oauth2.googleapis.com/token" help:"The cloud drive provider's OAuth token endpoint. Its TLS certificate is checked against the system's trusted CAs (SSL_CERT_FILE, SSL_CERT_DIR), as are the other endpoints'."`
	CloudDriveRevokeURL  string `name:"clouddrive-revoke-url" env:"CAPSTAN_CLOUDDRIVE_REVOKE_URL" default:"https://oauth2.googleapis.com/revoke" help:"The cloud drive provider's OAuth revocation endpoint."`
	CloudDriveAPIURL     string `name:"clouddrive-api-url" env:"CAPSTAN_CLOUDDRIVE_API_URL" default:"https://www.googleapis.com" help:"Base URL of the Drive v3 REST API (/drive/v3 and /upload/drive/v3 under it); agents upload backups there."`
}

// config reads the client secret and returns the service's configuration.
func (f cloudDriveFlags) config(publicURL string) (clouddrive.Config, error) {
	secret := os.Getenv("CAPSTAN_CLOUDDRIVE_CLIENT_SECRET")
	if f.CloudDriveSecretFile != "" {
		if secret != "" {
			return clouddrive.Config{}, fmt.Errorf("give the cloud drive's client secret once: CAPSTAN_CLOUDDRIVE_CLIENT_SECRET or --clouddrive-client-secret-file")
		}
		b, err := os.ReadFile(f.CloudDriveSecretFile)
		if err != nil {
			return clouddrive.Config{}, fmt.Errorf("--clouddrive-client-secret-file: %w", err)
		}
		secret = strings.TrimSpace(string(b))
	}
	if f.CloudDriveClientID == "" && secret != "" {
		return clouddrive.Config{}, fmt.Errorf("the cloud drive's client secret is set but --clouddrive-client-id is not")
	}
	if f.CloudDriveClientID != "" && secret == "" {
		return clouddrive.Config{}, fmt.Errorf("--clouddrive-client-id needs the client secret in CAPSTAN_CLOUDDRIVE_CLIENT_SECRET or --clouddrive-client-secret-file")
	}
	return clouddrive.Config{ClientID: f.CloudDriveClientID, ClientSecret: secret, AuthURL: f.CloudDriveAuthURL,
		TokenURL: f.CloudDriveTokenURL, RevokeURL: f.CloudDriveRevokeURL, APIURL: f.CloudDriveAPIURL, PublicURL: publicURL}, nil
}

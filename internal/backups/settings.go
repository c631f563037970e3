package backups

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Settings are where backups are stored, as kept: the access key pair
// sealed with the control plane's key.
type Settings struct {
	Provider              string
	Endpoint              string
	Region                string
	Bucket                string
	Prefix                string
	PathStyle             bool
	TLS                   bool
	CA                    string
	Folder                string
	SealedAccessKeyID     string
	SealedSecretAccessKey string
	// Revision counts saves, from 1.
	Revision  int64
	UpdatedBy string
	UpdatedAt time.Time
}

// SettingsInput is a PUT of the settings. Empty credentials keep the
// stored ones, as long as the endpoint stays the same.
type SettingsInput struct {
	Provider        string
	Endpoint        string
	Region          string
	Bucket          string
	Prefix          string
	AccessKeyID     string
	SecretAccessKey string
	PathStyle       bool
	// TLS is nil when not given: https, the default.
	TLS    *bool
	CA     string
	Folder string
}

// SettingsView is the settings as the API returns them: never the
// credentials, only whether they are set.
type SettingsView struct {
	Configured         bool       `json:"configured" doc:"Whether storage settings were saved; backups fail until they are"`
	Provider           string     `json:"provider" enum:"s3,clouddrive" doc:"s3: an S3-compatible bucket; clouddrive: a folder of the connected cloud drive"`
	Endpoint           string     `json:"endpoint" doc:"host[:port] of the S3 service"`
	Region             string     `json:"region" doc:"The bucket's region"`
	Bucket             string     `json:"bucket"`
	Prefix             string     `json:"prefix" doc:"Put before every object's key; ends in /"`
	PathStyle          bool       `json:"path_style" doc:"The bucket is addressed in the URL's path (https://host/bucket/key), not its host name"`
	TLS                bool       `json:"tls" doc:"https (true) or plain http"`
	CA                 string     `json:"ca" doc:"PEM certificate authority trusted besides the system's, for a service with a private CA"`
	Folder             string     `json:"folder" doc:"The cloud drive folder"`
	AccessKeyIDSet     bool       `json:"access_key_id_set" doc:"Whether an access key id is stored (it is never returned)"`
	SecretAccessKeySet bool       `json:"secret_access_key_set" doc:"Whether a secret access key is stored (it is never returned)"`
	UpdatedBy          string     `json:"updated_by,omitempty"`
	UpdatedAt          *time.Time `json:"updated_at,omitempty"`
}

// DefaultRegion is the region of settings saved without one: the one
// S3-compatible services answer to when they have no regions.
const DefaultRegion = "us-east-1"

// Limits of the settings' fields.
const (
	MaxEndpointLen  = 261 // a 253-byte name, ':' and a port
	MaxRegionLen    = 64
	MaxPrefixLen    = 512
	MaxAccessKeyLen = 128
	MaxSecretLen    = 256
	MaxCALen        = 64 << 10
	MaxFolderLen    = 256
)

func sealContext(field string) string { return "backup_settings." + field + ":1" }

func (st Settings) view() SettingsView {
	v := SettingsView{Configured: true, Provider: st.Provider, Endpoint: st.Endpoint, Region: st.Region, Bucket: st.Bucket,
		Prefix: st.Prefix, PathStyle: st.PathStyle, TLS: st.TLS, CA: st.CA, Folder: st.Folder,
		AccessKeyIDSet: st.SealedAccessKeyID != "", SecretAccessKeySet: st.SealedSecretAccessKey != "", UpdatedBy: st.UpdatedBy}
	at := st.UpdatedAt
	v.UpdatedAt = &at
	return v
}

// Settings returns the storage settings without credentials.
func (s *Service) Settings(ctx context.Context) (SettingsView, error) {
	st, err := s.store.BackupSettings(ctx)
	if fault.Is(err, fault.NotFound) {
		return SettingsView{Provider: agentproto.BackupProviderS3, TLS: true}, nil
	}
	if err != nil {
		return SettingsView{}, err
	}
	return st.view(), nil
}

// PutSettings validates and saves the storage settings. Invalid input
// changes nothing. Concurrent saves each apply whole, one after another.
func (s *Service) PutSettings(ctx context.Context, c audit.Caller, in SettingsInput) (SettingsView, error) {
	for {
		prev, err := s.store.BackupSettings(ctx)
		stored := err == nil
		if err != nil && !fault.Is(err, fault.NotFound) {
			return SettingsView{}, err
		}
		next, changed, err := s.merge(in, prev, stored)
		if err != nil {
			return SettingsView{}, err
		}
		next.Revision = prev.Revision + 1
		next.UpdatedBy = c.Actor.ID
		next.UpdatedAt = s.now().UTC()
		ok, err := s.store.PutBackupSettings(ctx, next, prev.Revision)
		if err != nil {
			return SettingsView{}, err
		}
		if !ok {
			continue // another save came first; apply this one on top of it
		}
		if err := s.audit.Record(ctx, c, ActionSettingsUpdated, audit.Target{Type: "backup_settings", ID: ""}, map[string]any{
			"provider": next.Provider, "endpoint": next.Endpoint, "bucket": next.Bucket, "prefix": next.Prefix, "folder": next.Folder,
			"credentials_changed": changed}); err != nil {
			return SettingsView{}, err
		}
		return next.view(), nil
	}
}

// merge checks in and makes the settings to store; empty credentials
// keep prev's (when stored) if the endpoint is the same. changed says
// whether new credentials were given.
func (s *Service) merge(in SettingsInput, prev Settings, stored bool) (Settings, bool, error) {
	var errs fault.Fields
	provider := in.Provider
	if provider == "" {
		provider = agentproto.BackupProviderS3
	}
	switch provider {
	case agentproto.BackupProviderS3:
	case agentproto.BackupProviderCloudDrive:
		return s.mergeCloudDrive(in)
	default:
		return Settings{}, false, fault.Invalidf("provider", "must be s3 or clouddrive")
	}
	next := Settings{Provider: provider, Endpoint: strings.TrimSpace(in.Endpoint), Region: in.Region, Bucket: in.Bucket,
		PathStyle: in.PathStyle, TLS: in.TLS == nil || *in.TLS, CA: strings.TrimSpace(in.CA)}
	if next.Region == "" {
		next.Region = DefaultRegion
	}
	if p := endpointProblem(next.Endpoint); p != "" {
		errs.Add("endpoint", "%s", p)
	}
	if p := regionProblem(next.Region); p != "" {
		errs.Add("region", "%s", p)
	}
	if p := bucketProblem(next.Bucket); p != "" {
		errs.Add("bucket", "%s", p)
	}
	prefix, p := normalPrefix(in.Prefix)
	if p != "" {
		errs.Add("prefix", "%s", p)
	}
	next.Prefix = prefix
	if next.CA != "" {
		if p := caProblem(next.CA); p != "" {
			errs.Add("ca", "%s", p)
		}
	}
	if in.Folder != "" {
		errs.Add("folder", "is for the clouddrive provider only")
	}
	keep := stored && prev.Provider == provider && prev.Endpoint == next.Endpoint
	changed := false
	credential := func(field, value string, maxLen int, sealed string) string {
		switch {
		case value == "" && keep && sealed != "":
			return sealed
		case value == "":
			if stored && prev.Endpoint != next.Endpoint {
				errs.Add(field, "is required when the endpoint changes")
			} else {
				errs.Add(field, "is required")
			}
		case len(value) > maxLen:
			errs.Add(field, "must be at most %d bytes", maxLen)
		case strings.IndexFunc(value, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
			errs.Add(field, "must not hold spaces or control characters")
		default:
			changed = true
			return s.key.Seal(sealContext(field), []byte(value))
		}
		return ""
	}
	next.SealedAccessKeyID = credential("access_key_id", in.AccessKeyID, MaxAccessKeyLen, prev.SealedAccessKeyID)
	next.SealedSecretAccessKey = credential("secret_access_key", in.SecretAccessKey, MaxSecretLen, prev.SealedSecretAccessKey)
	if err := errs.Err(); err != nil {
		return Settings{}, false, err
	}
	return next, changed, nil
}

// mergeCloudDrive checks cloud drive settings: a folder, nothing of S3.
func (s *Service) mergeCloudDrive(in SettingsInput) (Settings, bool, error) {
	var errs fault.Fields
	if s.drive == nil || !s.drive.Configured() {
		errs.Add("provider", "no cloud drive is configured on this control plane (--clouddrive-client-id)")
	}
	folder := strings.TrimSpace(in.Folder)
	switch {
	case folder == "":
		errs.Add("folder", "is required: the name of the folder in the drive's root that backups go to")
	case len(folder) > MaxFolderLen:
		errs.Add("folder", "must be at most %d bytes", MaxFolderLen)
	case strings.IndexFunc(folder, func(r rune) bool { return r < ' ' || r == 0x7f || r == '/' || r == '\\' }) >= 0:
		errs.Add("folder", "must be one folder name, without '/', '\\' or control characters")
	}
	for field, v := range map[string]string{"endpoint": in.Endpoint, "region": in.Region, "bucket": in.Bucket, "prefix": in.Prefix,
		"access_key_id": in.AccessKeyID, "secret_access_key": in.SecretAccessKey, "ca": in.CA} {
		if v != "" {
			errs.Add(field, "is for the s3 provider only")
		}
	}
	if in.PathStyle {
		errs.Add("path_style", "is for the s3 provider only")
	}
	if in.TLS != nil && !*in.TLS {
		errs.Add("tls", "is for the s3 provider only")
	}
	if err := errs.Err(); err != nil {
		return Settings{}, false, err
	}
	return Settings{Provider: agentproto.BackupProviderCloudDrive, Folder: folder, TLS: true}, false, nil
}

func endpointProblem(e string) string {
	switch {
	case e == "":
		return "is required: the S3 service's host[:port]"
	case len(e) > MaxEndpointLen:
		return "must be at most " + strconv.Itoa(MaxEndpointLen) + " bytes"
	case strings.Contains(e, "://"):
		return "must be host[:port] without a scheme (tls chooses https or, with false, plain http)"
	case strings.ContainsAny(e, "/?#@ \t"):
		return "must be host[:port], without a path, query or user"
	}
	host, port := e, ""
	if h, p, err := net.SplitHostPort(e); err == nil {
		host, port = h, p
	} else if strings.Count(e, ":") > 1 && !strings.HasPrefix(e, "[") {
		return "an IPv6 address goes in brackets: [::1]:9000"
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "has an invalid port (1 to 65535)"
		}
	}
	if net.ParseIP(host) != nil {
		return ""
	}
	if host == "" || len(host) > 253 {
		return "has an invalid host name"
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "has an invalid host name"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return "has an invalid host name"
			}
		}
	}
	return ""
}

func regionProblem(r string) string {
	if len(r) > MaxRegionLen {
		return "must be at most " + strconv.Itoa(MaxRegionLen) + " bytes"
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return "must be lowercase letters, digits, '-' and '_' (e.g. us-east-1)"
		}
	}
	return ""
}

// bucketProblem applies S3's bucket naming rules.
func bucketProblem(b string) string {
	switch {
	case b == "":
		return "is required"
	case len(b) < 3 || len(b) > 63:
		return "must be 3 to 63 characters"
	case strings.Contains(b, ".."):
		return "must not hold two adjacent periods"
	case net.ParseIP(b) != nil:
		return "must not be an IP address"
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		edge := i == 0 || i == len(b)-1
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || !edge && (c == '-' || c == '.')) {
			return "must be lowercase letters, digits, '.' and '-', starting and ending with a letter or digit"
		}
	}
	return ""
}

// normalPrefix checks a key prefix and ends it in "/".
func normalPrefix(p string) (string, string) {
	if p == "" {
		return "", ""
	}
	if len(p) > MaxPrefixLen {
		return "", "must be at most " + strconv.Itoa(MaxPrefixLen) + " bytes"
	}
	if strings.HasPrefix(p, "/") {
		return "", "must not start with '/'"
	}
	for _, r := range p {
		if r < ' ' || r == 0x7f || r == '\\' {
			return "", "must not hold control characters or '\\'"
		}
	}
	p = strings.TrimSuffix(p, "/")
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", "must not hold empty, '.' or '..' segments"
		}
	}
	return p + "/", ""
}

func caProblem(ca string) string {
	if len(ca) > MaxCALen {
		return "must be at most " + strconv.Itoa(MaxCALen) + " bytes"
	}
	rest := []byte(ca)
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return "must hold only PEM CERTIFICATE blocks"
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return "holds a certificate that does not parse: " + err.Error()
		}
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return "must be one or more PEM certificates"
	}
	return ""
}

// storage returns the settings as the payload of jobID, a job for
// serverID's agent, carries them: without credentials, the job's storage
// requests granted one by one (GrantStorage). fault.Conflict when none
// are saved, or when the agent is too old to take grants.
func (s *Service) storage(ctx context.Context, serverID, jobID string) (agentproto.BackupStorage, error) {
	st, err := s.store.BackupSettings(ctx)
	if fault.Is(err, fault.NotFound) {
		return agentproto.BackupStorage{}, fault.Conflictf("storage-not-configured",
			"No backup storage is configured; save it with PUT /api/v1/backups/settings.")
	}
	if err != nil {
		return agentproto.BackupStorage{}, err
	}
	if err := s.grantsAgent(ctx, serverID); err != nil {
		return agentproto.BackupStorage{}, err
	}
	if st.Provider == agentproto.BackupProviderCloudDrive {
		if s.drive == nil || !s.drive.Configured() {
			return agentproto.BackupStorage{}, fault.Conflictf("clouddrive-unavailable",
				"Backups go to the cloud drive, but no cloud drive is configured on this control plane.")
		}
		// The token stays here; minting it checks that a drive is
		// connected before the job is queued.
		if _, _, err := s.drive.AccessToken(ctx); err != nil {
			return agentproto.BackupStorage{}, err
		}
		return agentproto.BackupStorage{Provider: st.Provider, Folder: st.Folder, APIURL: s.drive.APIURL(), GrantJobID: jobID}, nil
	}
	return agentproto.BackupStorage{Provider: st.Provider, Endpoint: st.Endpoint, Region: st.Region, Bucket: st.Bucket,
		Prefix: st.Prefix, PathStyle: st.PathStyle, TLS: st.TLS, CA: st.CA, GrantJobID: jobID}, nil
}

// TestStorage queues backup.storage_test on serverID: its agent writes,
// reads back, lists and deletes a probe object in the storage.
func (s *Service) TestStorage(ctx context.Context, c audit.Caller, serverID string) (jobs.Job, error) {
	if serverID == "" {
		return jobs.Job{}, fault.Invalidf("server_id", "is required: the server whose agent tests the storage")
	}
	if err := s.enrolled(ctx, "server_id", serverID); err != nil {
		return jobs.Job{}, err
	}
	jobID := jobs.NewID(s.now())
	storage, err := s.storage(ctx, serverID, jobID)
	if err != nil {
		return jobs.Job{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: jobID, ServerID: serverID,
		Work: jobs.Of(agentproto.BackupStorageTest, agentproto.BackupStorageTestPayload{Storage: storage, Key: agentproto.BackupProbePrefix + jobID}), CreatedBy: c.Actor.ID})
	if err != nil {
		return jobs.Job{}, err
	}
	return j, s.audit.Record(ctx, c, ActionStorageTested, audit.Target{Type: "server", ID: serverID}, map[string]any{"job_id": j.ID})
}

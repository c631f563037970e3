package backups

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Storage grants: a server never holds a storage credential. Its agent
// asks for each request it makes to the storage on behalf of a backup job
// it runs, and gets one that works only for that job's objects and only
// until a little after the job's deadline (GrantMargin). For S3 the
// request is presigned here, with no call to the storage.

// GrantMargin is how long a grant outlives its job's deadline: a request
// started just before the deadline still finishes.
const GrantMargin = 5 * time.Minute

// minGrant is the shortest lifetime of a grant (a job at its deadline).
const minGrant = time.Minute

// jobScope is what a job may do in the storage: its keys (the object and
// its sidecar) and its operations.
type jobScope struct {
	key string
	ops []string
}

// Operations per job type.
var (
	opsRead   = []string{agentproto.StorageOpHead, agentproto.StorageOpGet}
	opsUpload = []string{agentproto.StorageOpPut, agentproto.StorageOpCreateUpload, agentproto.StorageOpUploadPart,
		agentproto.StorageOpCompleteUpload, agentproto.StorageOpAbortUpload}
	opsRun    = append(slices.Clone(opsUpload), opsRead...)
	opsDelete = append(slices.Clone(opsRead), agentproto.StorageOpDelete)
	opsProbe  = append(slices.Clone(opsRun), agentproto.StorageOpDelete, agentproto.StorageOpList)
)

// scopeOf reads a backup job's scope from its payload; a job of another
// type has none (fault.Forbidden).
func scopeOf(j jobs.Job) (jobScope, agentproto.BackupStorage, error) {
	var (
		sc  jobScope
		st  agentproto.BackupStorage
		err error
	)
	switch j.Type {
	case agentproto.JobBackupStorageTest:
		var p agentproto.BackupStorageTestPayload
		err = json.Unmarshal(j.Payload, &p)
		sc, st = jobScope{key: p.Key, ops: opsProbe}, p.Storage
	case agentproto.JobBackupRun:
		var p agentproto.BackupRunPayload
		err = json.Unmarshal(j.Payload, &p)
		sc, st = jobScope{key: p.Key, ops: opsRun}, p.Storage
	case agentproto.JobBackupVerify, agentproto.JobBackupRestore:
		var p agentproto.BackupRestorePayload
		err = json.Unmarshal(j.Payload, &p)
		sc, st = jobScope{key: p.Key, ops: opsRead}, p.Storage
	case agentproto.JobBackupDelete:
		var p agentproto.BackupDeletePayload
		err = json.Unmarshal(j.Payload, &p)
		sc, st = jobScope{key: p.Key, ops: opsDelete}, p.Storage
	default:
		return jobScope{}, st, fault.Forbiddenf("no-storage-grant", "A %s job has no access to the backup storage.", j.Type)
	}
	if err != nil {
		return jobScope{}, st, fmt.Errorf("%s job %s: %w", j.Type, j.ID, err)
	}
	if sc.key == "" || st.GrantJobID != j.ID {
		return jobScope{}, st, fault.Forbiddenf("no-storage-grant", "The job was queued with no storage grants.")
	}
	return sc, st, nil
}

// allows checks a request against the scope: 403 for another key or an
// operation the job does not do.
func (sc jobScope) allows(provider string, req agentproto.StorageGrantRequest) error {
	if !slices.Contains(sc.ops, req.Op) {
		return fault.Forbiddenf("storage-op-not-granted", "This job may not %s in the backup storage.", req.Op)
	}
	keys := []string{sc.key}
	if provider == agentproto.BackupProviderS3 {
		keys = append(keys, sc.key+agentproto.BackupSidecarSuffix)
	}
	if !slices.Contains(keys, req.Key) {
		return fault.Forbiddenf("storage-key-not-granted", "The key %q is not one of the job's objects.", req.Key)
	}
	switch req.Op {
	case agentproto.StorageOpUploadPart:
		if req.Part < 1 || req.Part > 10000 {
			return fault.Invalidf("part", "must be 1 to 10000")
		}
		fallthrough
	case agentproto.StorageOpCompleteUpload, agentproto.StorageOpAbortUpload:
		if req.UploadID == "" || len(req.UploadID) > 1024 {
			return fault.Invalidf("upload_id", "is required: the multipart upload's id")
		}
	}
	return nil
}

// GrantStorage answers the agent of serverID running jobID with what its
// request to the storage needs: a presigned S3 request, or a cloud drive
// upload session (or the outcome of an operation done here).
func (s *Service) GrantStorage(ctx context.Context, serverID, jobID string, req agentproto.StorageGrantRequest) (agentproto.StorageGrant, error) {
	j, err := s.jobs.Held(ctx, serverID, jobID)
	if err != nil {
		return agentproto.StorageGrant{}, err
	}
	sc, payload, err := scopeOf(j)
	if err != nil {
		return agentproto.StorageGrant{}, err
	}
	if err := sc.allows(payload.Provider, req); err != nil {
		return agentproto.StorageGrant{}, err
	}
	st, err := s.store.BackupSettings(ctx)
	if fault.Is(err, fault.NotFound) || err == nil && st.Provider != payload.Provider {
		return agentproto.StorageGrant{}, fault.Conflictf("storage-changed",
			"The backup storage settings changed since the job was queued; queue it again.")
	}
	if err != nil {
		return agentproto.StorageGrant{}, err
	}
	now := s.now()
	life := minGrant
	if j.DeadlineAt != nil {
		life = max(j.DeadlineAt.Sub(now)+GrantMargin, minGrant)
	}
	if st.Provider == agentproto.BackupProviderCloudDrive {
		return s.grantDrive(ctx, st, req)
	}
	return s.presign(ctx, st, req, now, life)
}

// presign makes the S3 request of req, valid for life from now.
func (s *Service) presign(ctx context.Context, st Settings, req agentproto.StorageGrantRequest, now time.Time,
	life time.Duration) (agentproto.StorageGrant, error) {
	cli, err := s.s3Client(st)
	if err != nil {
		return agentproto.StorageGrant{}, err
	}
	method, name, q := req.S3Request(st.Prefix)
	u, err := cli.Presign(ctx, method, st.Bucket, name, life.Truncate(time.Second), q)
	if err != nil {
		return agentproto.StorageGrant{}, fmt.Errorf("presigning %s of %s: %w", req.Op, req.Key, err)
	}
	return agentproto.StorageGrant{Method: method, URL: u.String(), ExpiresAt: now.Add(life.Truncate(time.Second)).UTC()}, nil
}

// s3Client is a client of the settings' bucket that only signs: minio
// makes no request for a presigned URL when the region is known.
func (s *Service) s3Client(st Settings) (*minio.Client, error) {
	id, err := s.key.Open(sealContext("access_key_id"), st.SealedAccessKeyID)
	if err != nil {
		return nil, err
	}
	secret, err := s.key.Open(sealContext("secret_access_key"), st.SealedSecretAccessKey)
	if err != nil {
		return nil, err
	}
	region := st.Region
	if region == "" {
		region = "us-east-1"
	}
	lookup := minio.BucketLookupDNS
	if st.PathStyle {
		lookup = minio.BucketLookupPath
	}
	cli, err := minio.New(st.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(string(id), string(secret), ""),
		Secure: st.TLS, Region: region, BucketLookup: lookup})
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	return cli, nil
}

// grantsAgent checks that serverID's agent takes storage grants: an
// older one would need the storage's credential, which is never sent.
func (s *Service) grantsAgent(ctx context.Context, serverID string) error {
	srv, err := s.servers.Get(ctx, serverID)
	if err != nil {
		return err
	}
	if srv.Facts != nil && slices.Contains(srv.Facts.Capabilities, agentproto.CapabilityStorageGrants) {
		return nil
	}
	version := "unknown"
	if srv.Facts != nil && strings.TrimSpace(srv.Facts.AgentVersion) != "" {
		version = srv.Facts.AgentVersion
	}
	return fault.Conflictf("agent-upgrade-required",
		"The agent of server %s (version %s) does not take storage grants: backup jobs no longer carry the storage's credential. "+
			"Upgrade the agent on the server, then try again.", serverID, version)
}

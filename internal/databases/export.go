package databases

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/artifacts"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// Exports and imports. A db.export job dumps one database on the
// instance's server; its agent streams the .sql.gz to the control plane
// (ReceiveExport), which encrypts it as it arrives into the artifact
// directory, to the instance's own identity (secrets.Key.InstanceIdentity),
// and records it as the job's artifact with the key id it names. An administrator
// downloads it decrypted (Download, audited) until it expires. An import
// goes the other way: the upload is encrypted as it arrives (Import), and
// the db.import job's agent fetches it (SendImport); the file is deleted
// when the job ends. The agent's calls are allowed only to the job's
// server and only while the job runs.

// Artifact kinds.
const (
	ArtifactExport = "export"
	ArtifactImport = "import"
)

// Audit actions of exports and imports.
const (
	ActionExportQueued     = "database.export.queued"
	ActionExportDownloaded = "database.export.downloaded"
	ActionImportQueued     = "database.import.queued"
)

// Defaults of ArtifactOptions.
const (
	DefaultArtifactTTL    = 7 * 24 * time.Hour
	DefaultMaxImportBytes = 10 << 30
	DefaultMaxExportBytes = 100 << 30
	// artifactSweepAge is how long a file no artifact names is left alone
	// (it may be one whose record is being written).
	artifactSweepAge = time.Hour
)

// Artifact is the file of an export or import job as stored.
type Artifact struct {
	JobID      string
	InstanceID string
	Kind       string // ArtifactExport or ArtifactImport
	Database   string
	// Format is agentproto.DBFormatSQLGzip for an export; what was
	// detected for an import.
	Format string
	// File names the encrypted file in the artifact directory.
	File string
	// Size and SHA256 (hex) are of the plaintext.
	Size   int64
	SHA256 string
	// KeyID names the identity the file is encrypted to
	// (secrets.InstanceKeyID of its instance; secrets.KeyIDFleet for a
	// file written before per-instance keys).
	KeyID     string
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// ArtifactStore persists artifact records.
type ArtifactStore interface {
	// InsertDatabaseArtifact stores a job's artifact; fault.Conflict
	// "artifact-exists" if the job has one.
	InsertDatabaseArtifact(ctx context.Context, a Artifact) error
	// DatabaseArtifact returns a job's artifact; fault.NotFound if none.
	DatabaseArtifact(ctx context.Context, jobID string) (Artifact, error)
	// ExpiredDatabaseArtifacts returns up to limit artifacts expired by
	// now, oldest first.
	ExpiredDatabaseArtifacts(ctx context.Context, now time.Time, limit int) ([]Artifact, error)
	// DatabaseArtifactFiles returns the files every artifact names.
	DatabaseArtifactFiles(ctx context.Context) (map[string]bool, error)
	// DeleteDatabaseArtifact deletes jobID's artifact if it names file;
	// false if it was deleted already.
	DeleteDatabaseArtifact(ctx context.Context, jobID, file string) (bool, error)
}

// ArtifactOptions configure exports and imports.
type ArtifactOptions struct {
	// Dir holds the encrypted files.
	Dir *artifacts.Dir
	// TTL is how long an export can be downloaded; 0 means
	// DefaultArtifactTTL.
	TTL time.Duration
	// MaxImportBytes and MaxExportBytes bound an upload's size; 0 means
	// the default.
	MaxImportBytes int64
	MaxExportBytes int64
}

// withDefaults is o with the defaults for what it leaves zero.
func (o ArtifactOptions) withDefaults() ArtifactOptions {
	if o.TTL <= 0 {
		o.TTL = DefaultArtifactTTL
	}
	if o.MaxImportBytes <= 0 {
		o.MaxImportBytes = DefaultMaxImportBytes
	}
	if o.MaxExportBytes <= 0 {
		o.MaxExportBytes = DefaultMaxExportBytes
	}
	return o
}

// registerArtifacts registers the job types of exports and imports,
// which stream the whole database. (Without an artifact directory, none
// is queued.)
func (s *Service) registerArtifacts(j *jobs.Service) {
	j.Register(agentproto.DBExport, jobs.Spec{Timeout: 6 * time.Hour, OnComplete: s.exportFinished})
	j.Register(agentproto.DBImport, jobs.Spec{Timeout: 6 * time.Hour, OnComplete: s.importFinished})
}

// MaxImportBytes is the largest import upload taken.
func (s *Service) MaxImportBytes() int64 { return s.artifacts.MaxImportBytes }

var errNoArtifacts = errors.New("databases: exports and imports are not configured (no artifact directory)")

// artifactDatabaseProblem says what is wrong with the name of a database
// to export or import into: 1 to the engine's length of ASCII letters,
// digits, '_', '$' and '-', not starting with '-'. The name reaches the
// dump and load tools as an argument, never in a statement or a shell;
// the rule keeps it from reading as an option or a connection string.
func artifactDatabaseProblem(engine, name string) string {
	maxLen := agentproto.DBIdentifierMaxLen(engine, agentproto.DBIdentDatabase)
	if maxLen == 0 {
		maxLen = MaxDatabaseLen
	}
	switch {
	case name == "":
		return "is required"
	case len(name) > maxLen:
		return fmt.Sprintf("must be at most %d bytes", maxLen)
	case name[0] == '-':
		return "must not start with '-'"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '$' || c == '-') {
			return "must be ASCII letters, digits, '_', '$' and '-'"
		}
	}
	return ""
}

// source is where an instance's dump tool runs: its container, a host
// client of its version, or the image of its version. A dump tool newer
// than the server may write statements only newer servers know (pg_dump
// promises its output loads into its own major, not an older one), so a
// dump never runs in a newer version's image.
func (s *Service) source(inst Instance) agentproto.DBArtifactSource {
	src := agentproto.DBArtifactSource{Version: inst.Version}
	if inst.Managed {
		src.ContainerName = ContainerName(inst.Name)
	}
	if e, ok := s.catalog.Engine(inst.Engine); ok {
		for _, v := range e.Versions {
			if v.Version == inst.Version {
				src.Image, src.ImageVersion = v.Image, v.Version
			}
		}
	}
	return src
}

// loadSource is where a load into an instance, or of its backup, runs:
// its container, or a throwaway container of the image of its version,
// or when that has none, of the newest version above it
// (Catalog.LoadImage). A snapshot or dump loads into the same or a newer
// version, never an older one; with no image at or above the instance's
// version Image is "" and Versions name those there are, for the
// agent's error.
func (s *Service) loadSource(inst Instance) agentproto.DBArtifactSource {
	src := agentproto.DBArtifactSource{Version: inst.Version}
	if inst.Managed {
		src.ContainerName = ContainerName(inst.Name)
	}
	v, versions, ok := s.catalog.LoadImage(inst.Engine, inst.Version)
	src.Versions = versions
	if ok {
		src.Image, src.ImageVersion = v.Image, v.Version
	}
	return src
}

// Export queues db.export of one database ("": the initial one) of a
// ready SQL instance.
func (s *Service) Export(ctx context.Context, c audit.Caller, id, database string) (jobs.Job, error) {
	if s.artifacts.Dir == nil {
		return jobs.Job{}, errNoArtifacts
	}
	var errs fault.Fields
	if database != "" {
		if p := artifactDatabaseProblem("", database); p != "" {
			errs.Add("database", "%s", p)
		}
	}
	inst, cred, password, err := s.ready(ctx, id, errs, agentproto.EngineKindSQL, "export")
	if err != nil {
		return jobs.Job{}, err
	}
	if database == "" {
		database = inst.Database
	}
	if p := artifactDatabaseProblem(inst.Engine, database); p != "" {
		return jobs.Job{}, fault.Invalidf("database", "%s", p)
	}
	j, err := s.enqueue(ctx, inst, jobs.Of(agentproto.DBExport, agentproto.DBExportPayload{Target: target(inst, cred), Source: s.source(inst),
		Database: database}), password, c.Actor.ID)
	if err != nil {
		return jobs.Job{}, err
	}
	return j, s.audit.Record(ctx, c, ActionExportQueued, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "database": database})
}

// agentJob returns the running job jobID of type jobType if it is
// serverID's: another server's job is fault.Forbidden "not-your-job", a
// job that is not running fault.Forbidden "job-not-running".
func (s *Service) agentJob(ctx context.Context, serverID, jobID, jobType string) (jobs.Job, error) {
	j, _, err := s.jobs.Get(ctx, jobID)
	if err != nil {
		return jobs.Job{}, err
	}
	if j.ServerID != serverID {
		return jobs.Job{}, fault.Forbiddenf("not-your-job", "This job belongs to another server.")
	}
	if j.Type != jobType {
		return jobs.Job{}, fault.Conflictf("no-artifact", "A %s job has no such artifact call.", j.Type)
	}
	if j.Status != jobs.Running {
		return jobs.Job{}, fault.Forbiddenf("job-not-running", "The artifact is only available while the job runs.")
	}
	return j, nil
}

// ReceiveExport stores the upload of a running db.export job of serverID,
// encrypted as it arrives, as the job's artifact.
func (s *Service) ReceiveExport(ctx context.Context, serverID, jobID string, body io.Reader) (agentproto.ArtifactReceipt, error) {
	if s.artifacts.Dir == nil {
		return agentproto.ArtifactReceipt{}, errNoArtifacts
	}
	j, err := s.agentJob(ctx, serverID, jobID, agentproto.JobDBExport)
	if err != nil {
		return agentproto.ArtifactReceipt{}, err
	}
	var p agentproto.DBExportPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return agentproto.ArtifactReceipt{}, fmt.Errorf("db.export job %s: %w", j.ID, err)
	}
	if _, err := s.store.DatabaseArtifact(ctx, jobID); err == nil {
		return agentproto.ArtifactReceipt{}, fault.Conflictf("artifact-exists", "The job's export was uploaded already.")
	}
	w, err := s.artifacts.Dir.Write(ctx, jobID, s.key.InstanceIdentity(p.Target.InstanceID).Recipient(), body, s.artifacts.MaxExportBytes)
	if errors.Is(err, artifacts.ErrTooLarge) {
		return agentproto.ArtifactReceipt{}, &fault.Error{Kind: fault.TooLarge, Code: "artifact-too-large",
			Message: fmt.Sprintf("An export is at most %d bytes.", s.artifacts.MaxExportBytes)}
	}
	if err != nil {
		return agentproto.ArtifactReceipt{}, err
	}
	now := s.now().UTC()
	a := Artifact{JobID: jobID, InstanceID: p.Target.InstanceID, Kind: ArtifactExport, Database: p.Database,
		Format: agentproto.DBFormatSQLGzip, File: w.File, Size: w.Size, SHA256: w.SHA256, KeyID: secrets.InstanceKeyID(p.Target.InstanceID),
		CreatedBy: j.CreatedBy, CreatedAt: now,
		ExpiresAt: now.Add(s.artifacts.TTL)}
	if err := s.store.InsertDatabaseArtifact(context.WithoutCancel(ctx), a); err != nil {
		// Two uploads of the same job at once: the first stored wins.
		if rerr := s.artifacts.Dir.Remove(w.File); rerr != nil {
			s.log.ErrorContext(ctx, "removing an artifact file", "file", w.File, "err", rerr.Error())
		}
		return agentproto.ArtifactReceipt{}, err
	}
	// The job may have ended while the file arrived (its deadline, its
	// lease): then its completion hook ran before the record existed.
	if j, _, err := s.jobs.Get(ctx, jobID); err != nil || j.Status != jobs.Running {
		s.dropArtifact(context.WithoutCancel(ctx), a)
		if err != nil {
			return agentproto.ArtifactReceipt{}, err
		}
		return agentproto.ArtifactReceipt{}, fault.Forbiddenf("job-not-running", "The job ended while its file arrived.")
	}
	return agentproto.ArtifactReceipt{Bytes: w.Size, SHA256: w.SHA256}, nil
}

// SendImport opens the file a running db.import job of serverID loads.
func (s *Service) SendImport(ctx context.Context, serverID, jobID string) (io.ReadCloser, Artifact, error) {
	if s.artifacts.Dir == nil {
		return nil, Artifact{}, errNoArtifacts
	}
	if _, err := s.agentJob(ctx, serverID, jobID, agentproto.JobDBImport); err != nil {
		return nil, Artifact{}, err
	}
	a, err := s.store.DatabaseArtifact(ctx, jobID)
	if err != nil {
		return nil, Artifact{}, err
	}
	rc, err := s.openArtifact(a)
	if errors.Is(err, os.ErrNotExist) {
		return nil, Artifact{}, fault.New(fault.Gone, "artifact-missing", "The file is not in this control plane's data dir.")
	}
	return rc, a, err
}

// openArtifact opens an artifact's file with the identity its key id
// names. The files are the control plane's: a fleet-wide key id (a file
// written before per-instance keys) opens with the control plane's own
// fleet-wide identity, which never leaves it.
func (s *Service) openArtifact(a Artifact) (io.ReadCloser, error) {
	id, err := s.key.IdentityOf(a.KeyID)
	if err != nil {
		return nil, fmt.Errorf("artifact of job %s: %w", a.JobID, err)
	}
	return s.artifacts.Dir.Open(a.File, id)
}

// Download is an export being downloaded. The caller closes it.
type Download struct {
	io.ReadCloser
	// Name is the file name to save it as.
	Name     string
	Artifact Artifact
}

// Download opens the export of job jobID of instance id, decrypted, and
// records who downloads it from where before a byte is read.
func (s *Service) Download(ctx context.Context, c audit.Caller, id, jobID string) (Download, error) {
	if s.artifacts.Dir == nil {
		return Download{}, errNoArtifacts
	}
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return Download{}, err
	}
	j, _, err := s.jobs.Get(ctx, jobID)
	if fault.Is(err, fault.NotFound) || err == nil && (j.Type != agentproto.JobDBExport || instanceOf(j) != id) {
		return Download{}, fault.NotFoundf("No such export of this database instance.")
	}
	if err != nil {
		return Download{}, err
	}
	switch {
	case !j.Status.Finished():
		return Download{}, fault.Conflictf("export-running", "The export is %s; download it once its job succeeded.", j.Status)
	case j.Status != jobs.Succeeded:
		return Download{}, fault.Conflictf("export-failed", "The export %s; it has no file.", j.Status)
	}
	a, err := s.store.DatabaseArtifact(ctx, jobID)
	if fault.Is(err, fault.NotFound) || err == nil && !a.ExpiresAt.After(s.now()) {
		return Download{}, fault.New(fault.Gone, "export-expired", "The export expired and was deleted; export again.")
	}
	if err != nil {
		return Download{}, err
	}
	rc, err := s.openArtifact(a)
	if errors.Is(err, os.ErrNotExist) {
		return Download{}, fault.New(fault.Gone, "export-missing", "The export's file is not in this control plane's data dir.")
	}
	if err != nil {
		return Download{}, err
	}
	// Recorded before a byte is sent: a download that cannot be audited
	// does not happen.
	if err := s.audit.Record(ctx, c, ActionExportDownloaded, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": jobID, "database": a.Database,
		"bytes": a.Size, "sha256": a.SHA256}); err != nil {
		rc.Close()
		return Download{}, err
	}
	name := fmt.Sprintf("%s-%s-%s.sql.gz", inst.Name, a.Database, a.CreatedAt.UTC().Format("20060102-150405"))
	return Download{ReadCloser: rc, Name: name, Artifact: a}, nil
}

// ImportRequest is an upload to load into a database.
type ImportRequest struct {
	// Database is the database to load into; "" means the initial one.
	Database string
	// Body is the file. DeclaredSize is its Content-Length, -1 if the
	// request did not say.
	Body         io.Reader
	DeclaredSize int64
}

// Import stores an upload, encrypted as it arrives, and queues db.import
// of it on a ready SQL instance. Its format is detected from its first
// bytes: gzip, PostgreSQL's custom format, or plain SQL.
func (s *Service) Import(ctx context.Context, c audit.Caller, id string, q ImportRequest) (jobs.Job, error) {
	if s.artifacts.Dir == nil {
		return jobs.Job{}, errNoArtifacts
	}
	limit := s.artifacts.MaxImportBytes
	tooLarge := &fault.Error{Kind: fault.TooLarge, Code: "upload-too-large",
		Message: fmt.Sprintf("An import is at most %d bytes (--database-import-max-size).", limit)}
	if q.DeclaredSize > limit {
		return jobs.Job{}, tooLarge
	}
	var errs fault.Fields
	if q.Database != "" {
		if p := artifactDatabaseProblem("", q.Database); p != "" {
			errs.Add("database", "%s", p)
		}
	}
	inst, cred, password, err := s.ready(ctx, id, errs, agentproto.EngineKindSQL, "import")
	if err != nil {
		return jobs.Job{}, err
	}
	database := q.Database
	if database == "" {
		database = inst.Database
	}
	if p := artifactDatabaseProblem(inst.Engine, database); p != "" {
		return jobs.Job{}, fault.Invalidf("database", "%s", p)
	}
	body := bufio.NewReaderSize(q.Body, 64<<10)
	head, err := body.Peek(5)
	if len(head) == 0 {
		if err != nil && !errors.Is(err, io.EOF) {
			return jobs.Job{}, err
		}
		return jobs.Job{}, fault.Invalidf("body", "is empty: send the file (.sql, .sql.gz or a custom-format dump) as the request body")
	}
	format := DetectFormat(head)
	if format == agentproto.DBFormatPGCustom && inst.Engine != agentproto.EnginePostgres {
		return jobs.Job{}, fault.Invalidf("body", "is a PostgreSQL custom-format dump; %s loads SQL (.sql or .sql.gz)", inst.Engine)
	}
	now := s.now().UTC()
	jobID := jobs.NewID(now)
	w, err := s.artifacts.Dir.Write(ctx, jobID, s.key.InstanceIdentity(id).Recipient(), body, limit)
	if errors.Is(err, artifacts.ErrTooLarge) {
		return jobs.Job{}, tooLarge
	}
	if err != nil {
		return jobs.Job{}, err
	}
	a := Artifact{JobID: jobID, InstanceID: id, Kind: ArtifactImport, Database: database, Format: format, File: w.File, Size: w.Size,
		SHA256: w.SHA256, KeyID: secrets.InstanceKeyID(id), CreatedBy: c.Actor.ID, CreatedAt: now, ExpiresAt: now.Add(s.artifacts.TTL)}
	if err := s.store.InsertDatabaseArtifact(ctx, a); err != nil {
		s.dropArtifact(context.WithoutCancel(ctx), a)
		return jobs.Job{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ID: jobID, ServerID: inst.ServerID,
		Work: jobs.Of(agentproto.DBImport, agentproto.DBImportPayload{Target: target(inst, cred), Source: s.loadSource(inst), Database: database, Format: format,
			Bytes: w.Size, SHA256: w.SHA256}),
		Secrets: map[string]string{agentproto.SecretDBPassword: password}, CreatedBy: c.Actor.ID})
	if err != nil {
		s.dropArtifact(context.WithoutCancel(ctx), a)
		return jobs.Job{}, err
	}
	return j, s.audit.Record(ctx, c, ActionImportQueued, audit.Target{Type: "database", ID: id}, map[string]any{"job_id": j.ID, "database": database, "format": format,
		"bytes": w.Size, "sha256": w.SHA256})
}

// DetectFormat tells an import's format from its first bytes.
func DetectFormat(head []byte) string {
	switch {
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		return agentproto.DBFormatSQLGzip
	case bytes.HasPrefix(head, []byte("PGDMP")):
		return agentproto.DBFormatPGCustom
	}
	return agentproto.DBFormatSQL
}

// dropArtifact deletes an artifact's record and, if this call deleted
// it, its file.
func (s *Service) dropArtifact(ctx context.Context, a Artifact) {
	gone, err := s.store.DeleteDatabaseArtifact(ctx, a.JobID, a.File)
	if err == nil && gone {
		err = s.artifacts.Dir.Remove(a.File)
	}
	if err != nil {
		s.log.ErrorContext(ctx, "deleting a database artifact", "job_id", a.JobID, "file", a.File, "err", err.Error())
	}
}

// exportFinished is the completion hook of db.export: a failed export
// keeps no file, and a file that is not what the agent says it sent is
// deleted.
func (s *Service) exportFinished(ctx context.Context, j jobs.Job) error {
	ctx = context.WithoutCancel(ctx)
	a, err := s.store.DatabaseArtifact(ctx, j.ID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if j.Status == jobs.Succeeded {
		var r agentproto.DBExportResult
		if json.Unmarshal(j.Data, &r) == nil && r.SHA256 == a.SHA256 && r.Bytes == a.Size {
			return nil
		}
		s.log.ErrorContext(ctx, "an export's file is not what its agent sent; deleted", "job_id", j.ID, "stored_sha256", a.SHA256,
			"stored_bytes", a.Size, "sent_sha256", r.SHA256, "sent_bytes", r.Bytes)
	}
	s.dropArtifact(ctx, a)
	return nil
}

// importFinished is the completion hook of db.import: the uploaded file
// has served its purpose.
func (s *Service) importFinished(ctx context.Context, j jobs.Job) error {
	ctx = context.WithoutCancel(ctx)
	a, err := s.store.DatabaseArtifact(ctx, j.ID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	s.dropArtifact(ctx, a)
	return nil
}

// ReapArtifacts deletes the artifacts that expired, with their files,
// and files in the artifact directory that no artifact names. Several
// control planes may run it at once: each record is deleted by one of
// them, which removes its file.
func (s *Service) ReapArtifacts(ctx context.Context) (int, error) {
	if s.artifacts.Dir == nil {
		return 0, nil
	}
	n := 0
	for {
		expired, err := s.store.ExpiredDatabaseArtifacts(ctx, s.now().UTC(), 100)
		if err != nil {
			return n, err
		}
		for _, a := range expired {
			gone, err := s.store.DeleteDatabaseArtifact(ctx, a.JobID, a.File)
			if err != nil {
				return n, err
			}
			if gone {
				if err := s.artifacts.Dir.Remove(a.File); err != nil {
					return n, err
				}
				n++
			}
		}
		if len(expired) < 100 {
			break
		}
	}
	files, err := s.store.DatabaseArtifactFiles(ctx)
	if err != nil {
		return n, err
	}
	swept, err := s.artifacts.Dir.Sweep(time.Now().Add(-artifactSweepAge), func(f string) bool { return files[f] })
	return n + swept, err
}

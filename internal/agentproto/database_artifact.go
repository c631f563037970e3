package agentproto

// Database exports and imports travel as job artifacts: one file per job,
// streamed. An agent running db.export uploads the dump, gzip-compressed,
// with PUT /agent/v1/jobs/{id}/artifact (the control plane encrypts it as
// it arrives and answers ArtifactReceipt); an agent running db.import
// downloads the file to load with GET /agent/v1/jobs/{id}/artifact. Both
// calls are allowed only to the job's server and only while the job runs.

// Job types of exports and imports.
const (
	// JobDBExport dumps one database of a SQL instance and uploads it as
	// .sql.gz: DBExportPayload → DBExportResult. The admin login's
	// password is in SecretDBPassword.
	JobDBExport = "db.export"
	// JobDBImport downloads the job's artifact and loads it into one
	// database: DBImportPayload → DBImportResult.
	JobDBImport = "db.import"
)

// ArtifactContentType is the content type of an artifact upload and
// download.
const ArtifactContentType = "application/octet-stream"

// Formats of an import's file, detected from its content.
const (
	// DBFormatSQL is plain SQL text.
	DBFormatSQL = "sql"
	// DBFormatSQLGzip is plain SQL compressed with gzip.
	DBFormatSQLGzip = "sql.gz"
	// DBFormatPGCustom is PostgreSQL's custom archive format (pg_dump
	// -Fc), which pg_restore loads.
	DBFormatPGCustom = "pgdump"
)

// How a dump or a load was run.
const (
	// DBToolContainer: in the managed instance's own container (docker
	// exec), so the tool's version is the engine's.
	DBToolContainer = "container"
	// DBToolHost: a client of the engine's major version installed on the
	// server.
	DBToolHost = "host"
	// DBToolImage: the engine's image in a throwaway container on the
	// host's network.
	DBToolImage = "image"
)

// DBArtifactSource says where the tools of an export or import run.
type DBArtifactSource struct {
	// ContainerName is the managed instance's container; "" for an
	// external instance.
	ContainerName string `json:"container_name,omitempty"`
	// Image is the container image of the engine's version, for a
	// throwaway container when no client of that major is on the server.
	Image string `json:"image,omitempty"`
	// Version is the engine's major version as Capstan lists it ("15",
	// "10.11"); "" when not known.
	Version string `json:"version,omitempty"`
	// ImageVersion is the engine version Image runs. A dump's Image is
	// always of Version itself. A load's (db.import, backup.verify,
	// backup.restore) is of the version LoadVersion picks among those
	// with an image: Version, or when it has none, the newest one above
	// it. "" means Version (control planes before 2026-12-01).
	ImageVersion string `json:"image_version,omitempty"`
	// Versions are the versions of the engine that have an image, newest
	// first, in a load's payload: an agent that has no image (Image "")
	// and no suitable server of its own says them in its error. Nil when
	// not known.
	Versions []string `json:"versions,omitempty"`
}

// DBExportPayload is the payload of db.export.
type DBExportPayload struct {
	Target DBTarget         `json:"target"`
	Source DBArtifactSource `json:"source"`
	// Database is the database to dump.
	Database string `json:"database"`
}

// DBExportResult is the data of a finished db.export.
type DBExportResult struct {
	// Tool is how the dump ran: DBToolContainer, DBToolHost or
	// DBToolImage; ToolVersion is what the dump tool reported of itself.
	Tool        string `json:"tool"`
	ToolVersion string `json:"tool_version,omitempty"`
	// Bytes and SHA256 (hex) are of the .sql.gz uploaded; DumpBytes is
	// the size of the SQL before compression.
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
	DumpBytes int64  `json:"dump_bytes"`
}

// ArtifactReceipt is the reply to an artifact upload: what the control
// plane stored, to compare with what the agent sent.
type ArtifactReceipt struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// DBImportPayload is the payload of db.import.
type DBImportPayload struct {
	Target DBTarget         `json:"target"`
	Source DBArtifactSource `json:"source"`
	// Database is the database to load into; it must exist.
	Database string `json:"database"`
	// Format is the file's format as the control plane detected it from
	// its first bytes (DBFormat*); a gzip file is looked into again by
	// the agent (it may hold a custom-format archive).
	Format string `json:"format"`
	// Bytes and SHA256 (hex) are of the file the artifact download
	// returns.
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// DBImportResult is the data of a finished db.import.
type DBImportResult struct {
	// Format is the format loaded: DBFormatSQL or DBFormatPGCustom
	// (after any gzip was taken off).
	Format string `json:"format"`
	Tool   string `json:"tool"`
	// Atomic says the load ran in one transaction: all of it was applied
	// or, had it failed, none. MySQL/MariaDB loads are not atomic.
	Atomic bool `json:"atomic"`
	// Bytes is the size of the file downloaded.
	Bytes int64 `json:"bytes"`
	// Output is the last lines the load tool printed.
	Output string `json:"output,omitempty"`
}

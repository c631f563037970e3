package agentproto

// Backups. The storage a backup goes to travels in each job's payload
// as BackupStorage, without credentials. Control planes before storage
// grants (backup_grant.go) put the credentials in the job's secrets
// (SecretS3AccessKeyID, SecretS3SecretAccessKey, SecretCloudDriveToken);
// later ones grant each request instead and send no credential.

// Job types of backups.
const (
	// JobBackupStorageTest writes, reads back, lists and deletes a probe
	// object in the configured storage: BackupStorageTestPayload →
	// BackupStorageTestResult (its data also when it fails).
	JobBackupStorageTest = "backup.storage_test"
)

// Job secrets of backups.
const (
	SecretS3AccessKeyID     = "s3_access_key_id"
	SecretS3SecretAccessKey = "s3_secret_access_key"
	// SecretCloudDriveToken is a short-lived OAuth access token of the
	// connected cloud drive (never its refresh token).
	SecretCloudDriveToken = "clouddrive_access_token"
)

// Storage providers.
const (
	// BackupProviderS3 is an S3-compatible bucket.
	BackupProviderS3 = "s3"
	// BackupProviderCloudDrive is a folder of the connected cloud drive.
	BackupProviderCloudDrive = "clouddrive"
)

// BackupStorage is where backups are stored, without credentials.
type BackupStorage struct {
	// Provider is BackupProvider*.
	Provider string `json:"provider"`
	// Endpoint is the S3 service's host[:port].
	Endpoint string `json:"endpoint,omitempty"`
	// Region is the bucket's region; "" means us-east-1.
	Region string `json:"region,omitempty"`
	Bucket string `json:"bucket,omitempty"`
	// Prefix is put before every key; "" for none.
	Prefix string `json:"prefix,omitempty"`
	// PathStyle addresses the bucket in the URL's path, not its host.
	PathStyle bool `json:"path_style,omitempty"`
	// TLS selects https.
	TLS bool `json:"tls,omitempty"`
	// CA is a PEM certificate authority trusted besides the system's;
	// "" for none.
	CA string `json:"ca,omitempty"`
	// Folder is the cloud drive folder.
	Folder string `json:"folder,omitempty"`
	// APIURL is the cloud drive's API base URL; "" is the provider's.
	APIURL string `json:"api_url,omitempty"`
	// GrantJobID, when set, is the job whose storage requests the
	// control plane grants one by one (backup_grant.go): the job's
	// secrets hold no storage credential. "" from control planes that
	// sent the credential in the job's secrets.
	GrantJobID string `json:"grant_job_id,omitempty"`
}

// BackupStorageTestPayload is the payload of backup.storage_test.
type BackupStorageTestPayload struct {
	Storage BackupStorage `json:"storage"`
	// Key is the probe object's key; "" from control planes before
	// storage grants, meaning ProbePrefix followed by the job's id.
	Key string `json:"key,omitempty"`
}

// BackupProbePrefix is where storage tests write their probe objects.
const BackupProbePrefix = "capstan-probe/"

// Steps of backup.storage_test, in the order they run.
const (
	BackupStepWrite  = "write"
	BackupStepRead   = "read"
	BackupStepList   = "list"
	BackupStepDelete = "delete"
)

// BackupStorageStep is one step of a storage test.
type BackupStorageStep struct {
	// Step is BackupStep*.
	Step string `json:"step"`
	OK   bool   `json:"ok"`
	// DurationMS is how long the step took.
	DurationMS int64 `json:"duration_ms"`
	// Error is what went wrong, with the provider's own error text; ""
	// when OK.
	Error string `json:"error,omitempty"`
}

// BackupStorageTestResult is the data of backup.storage_test: the steps
// run, up to the first that failed.
type BackupStorageTestResult struct {
	// Key is the probe object's key (under the storage's prefix).
	Key   string              `json:"key"`
	Bytes int64               `json:"bytes"`
	Steps []BackupStorageStep `json:"steps"`
}

// JobBackupRun dumps one database, compresses and encrypts it on the
// server, keeps a local copy and uploads it: BackupRunPayload →
// BackupRunResult. The admin login's password is in SecretDBPassword,
// the storage's credentials in SecretS3*.
const JobBackupRun = "backup.run"

// Manifest kinds.
const (
	BackupManifestSQL = "sql"
	BackupManifestKV  = "kv"
)

// BackupManifest describes a backup's content as it was when the dump's
// snapshot was taken, to compare with a restore of it.
type BackupManifest struct {
	// Kind is BackupManifest*.
	Kind string `json:"kind"`
	// Tables of a SQL database, by schema-qualified name, in name order.
	Tables []BackupTable `json:"tables,omitempty"`
	// Keys counts a key-value database's keys per type.
	Keys map[string]int64 `json:"keys,omitempty"`
}

// BackupTable is one table of a SQL manifest.
type BackupTable struct {
	Name string `json:"name"`
	Rows int64  `json:"rows"`
	// Checksum is an order-independent checksum of the rows' text forms
	// (the sum of the first 64 bits of each row's MD5, in decimal).
	Checksum string `json:"checksum"`
}

// BackupRunPayload is the payload of backup.run.
type BackupRunPayload struct {
	RunID    string           `json:"run_id"`
	Target   DBTarget         `json:"target"`
	Source   DBArtifactSource `json:"source"`
	Database string           `json:"database"`
	Storage  BackupStorage    `json:"storage"`
	// Key is the object's key in the storage (under its prefix).
	Key string `json:"key"`
	// Recipient is the age X25519 recipient (age1…) the backup is
	// encrypted to.
	Recipient string `json:"recipient"`
	// LocalDir is where the server keeps local copies ("" : the agent's
	// default); LocalKeep is how many of one database it keeps there
	// (0: none).
	LocalDir  string `json:"local_dir,omitempty"`
	LocalKeep int    `json:"local_keep,omitempty"`
	// LocalProtect are runs of the database whose local copies stay
	// whatever LocalKeep says: the newest verified backup's.
	LocalProtect []string `json:"local_protect,omitempty"`
}

// BackupRunResult is the data of backup.run; when it fails, what was
// done up to then.
type BackupRunResult struct {
	Tool        string `json:"tool,omitempty"`
	ToolVersion string `json:"tool_version,omitempty"`
	// Bytes and SHA256 (hex) are of the encrypted object as the agent
	// streamed it; DumpBytes is the dump's size before compression.
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256,omitempty"`
	DumpBytes int64  `json:"dump_bytes"`
	// Remote is the storage's record of the object read back after the
	// upload; nil when the upload failed.
	Remote *BackupObject `json:"remote,omitempty"`
	// Local is the path of the local copy; "" when none is kept.
	Local string `json:"local,omitempty"`
	// LocalRemoved are the runs whose older local copies this run removed
	// beyond LocalKeep.
	LocalRemoved []string        `json:"local_removed,omitempty"`
	Manifest     *BackupManifest `json:"manifest,omitempty"`
	// Step is where a failed run stopped: dump, upload, read_back.
	Step string `json:"step,omitempty"`
}

// BackupObject is an object as the storage reports it.
type BackupObject struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Job types of verification and restore. Both fetch the object from the
// storage (never the local copy), check its size and SHA-256, decrypt it
// with the identity in SecretBackupIdentity and load it; the manifest of
// what was loaded is compared with the backup's.
const (
	// JobBackupVerify loads a backup into a throwaway database that is
	// dropped afterwards: BackupRestorePayload → BackupVerifyResult.
	JobBackupVerify = "backup.verify"
	// JobBackupRestore loads a backup into a new database (mode new) or
	// into a temporary one that then replaces the target (mode replace):
	// BackupRestorePayload → BackupVerifyResult.
	JobBackupRestore = "backup.restore"
)

// SecretBackupIdentity is the age identity (AGE-SECRET-KEY-1…) that
// decrypts backups, given only to verify and restore jobs.
const SecretBackupIdentity = "backup_identity"

// Restore modes.
const (
	BackupRestoreNew     = "new"
	BackupRestoreReplace = "replace"
)

// BackupRestorePayload is the payload of backup.verify and
// backup.restore.
type BackupRestorePayload struct {
	RunID   string           `json:"run_id"`
	Target  DBTarget         `json:"target"`
	Source  DBArtifactSource `json:"source"`
	Storage BackupStorage    `json:"storage"`
	Key     string           `json:"key"`
	// Size and SHA256 are the object's as the backup recorded them.
	Size     int64          `json:"size"`
	SHA256   string         `json:"sha256"`
	Manifest BackupManifest `json:"manifest"`
	// Mode is BackupRestore* (backup.restore only); Into is the database
	// restored into (new) or replaced (replace).
	Mode string `json:"mode,omitempty"`
	Into string `json:"into,omitempty"`
}

// BackupCompared is one table's comparison with the manifest.
type BackupCompared struct {
	Name         string `json:"name"`
	Rows         int64  `json:"rows"`
	WantRows     int64  `json:"want_rows"`
	Checksum     string `json:"checksum"`
	WantChecksum string `json:"want_checksum"`
	OK           bool   `json:"ok"`
}

// BackupVerifyResult is the data of backup.verify and backup.restore,
// also when they fail.
type BackupVerifyResult struct {
	OK bool `json:"ok"`
	// Bytes and SHA256 are of the object as fetched; ChecksumOK says
	// they are the backup's.
	Bytes      int64  `json:"bytes"`
	SHA256     string `json:"sha256"`
	ChecksumOK bool   `json:"checksum_ok"`
	// Database is the database loaded (the throwaway one for a
	// verification, dropped since).
	Database string           `json:"database"`
	Tables   []BackupCompared `json:"tables"`
	// EngineVersion is the version of the server the backup was loaded
	// into, as it reports itself: a throwaway Redis/Valkey server's
	// ("7.0.15"), or for a SQL backup the instance's own server's.
	// Loader is how it was loaded (DBTool*): DBToolHost, a server
	// installed on the agent's host; DBToolImage, a throwaway container
	// (the server, or the SQL load tool); DBToolContainer, the managed
	// instance's own container. LoaderVersion is the engine version of
	// that binary or image, the one LoadVersion picked (the image's
	// catalogue version, "7.4", or the host binary's, "7.0.15"), and
	// LoaderRef the image's reference or the binary's path. All "" from
	// agents before 2026-12-01, and when the job failed before choosing.
	EngineVersion string `json:"engine_version,omitempty"`
	Loader        string `json:"loader,omitempty"`
	LoaderVersion string `json:"loader_version,omitempty"`
	LoaderRef     string `json:"loader_ref,omitempty"`
	// Error says what failed: the checksum, the decryption, the load
	// tool's message, or the tables that differ.
	Error string `json:"error,omitempty"`
}

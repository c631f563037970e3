package agentproto

// Backups. The storage a backup goes to travels in each job's payload
// as BackupStorage, without its credentials: those are in the job's
// secrets (SecretS3AccessKeyID, SecretS3SecretAccessKey).

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
}

// BackupStorageTestPayload is the payload of backup.storage_test.
type BackupStorageTestPayload struct {
	Storage BackupStorage `json:"storage"`
}

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

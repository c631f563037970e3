package agentproto

// JobBackupDelete deletes a backup: its local copy on the server and its
// object in the storage, each reported on its own: BackupDeletePayload →
// BackupDeleteResult (its data also when it fails). The storage's
// credentials are in the job's secrets, as for backup.run. The job
// succeeds only when the object is gone from the storage (deleted, or
// not there) and the local copy is gone.
const JobBackupDelete = "backup.delete"

// BackupDeletePayload is the payload of backup.delete.
type BackupDeletePayload struct {
	RunID   string        `json:"run_id"`
	Storage BackupStorage `json:"storage"`
	// Key is the object's key in the storage (under its prefix).
	Key string `json:"key"`
	// Local is the path of the local copy; "" when none was kept. The
	// agent deletes only a regular file named after the run (RunID, then
	// a '.', ending in ".age").
	Local string `json:"local,omitempty"`
}

// BackupDeleteStep is the outcome of deleting one copy.
type BackupDeleteStep struct {
	OK bool `json:"ok"`
	// Gone says the copy was not there to delete (already deleted).
	Gone bool `json:"gone,omitempty"`
	// Error is what went wrong, with the storage's or the system's own
	// error text; "" when OK.
	Error string `json:"error,omitempty"`
}

// BackupDeleteResult is the data of backup.delete.
type BackupDeleteResult struct {
	Local  BackupDeleteStep `json:"local"`
	Remote BackupDeleteStep `json:"remote"`
}

package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/capstan-dev/capstan/internal/agent/dump"
	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// DefaultStagingDir is Backups.StagingDir when it is not set: under the
// agent's systemd state directory.
const DefaultStagingDir = "/var/lib/capstan-agent/restore"

// stagingDir is where fetched objects wait for their check.
func (b *Backups) stagingDir() string {
	if b.StagingDir != "" {
		return b.StagingDir
	}
	return DefaultStagingDir
}

// fetchChecked downloads the object of a verification or restore into a
// new file of the staging directory (0600) and returns it, at its start,
// only once its size and SHA-256 are the job's (p.Size, p.SHA256): the
// control plane's record of what was uploaded. What the storage says of
// the object (its size, a checksum beside it) is not trusted: a writer of
// the bucket can replace those along with the object. A mismatch is
// errChecksum, and the file is gone; so it is after any other failure.
// The file holds ciphertext, as the storage does. The caller closes and
// removes it (removeStaged).
func (b *Backups) fetchChecked(ctx context.Context, st objstore.Store, p agentproto.BackupRestorePayload,
	res *agentproto.BackupVerifyResult) (*os.File, error) {
	dir := b.stagingDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	if free, err := freeBytes(dir); err == nil && free < uint64(max(p.Size, 0)) {
		return nil, fmt.Errorf("%s has %d bytes free; fetching the backup needs %d: free some space on the server and try again", dir,
			free, p.Size)
	}
	f, err := os.CreateTemp(dir, "fetch-*.age")
	if err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			removeStaged(f)
		}
	}()
	rc, _, err := st.Get(ctx, p.Key)
	if err != nil {
		return nil, fmt.Errorf("fetching the backup from the storage: %w", err)
	}
	defer rc.Close()
	// One byte more than the backup tells an object that is longer, and
	// bounds what is written.
	fetched := dump.NewHasher(io.LimitReader(rc, p.Size+1))
	if _, err := io.Copy(f, fetched); err != nil {
		var werr *os.PathError
		if errors.As(err, &werr) {
			return nil, fmt.Errorf("writing the backup to %s: %w", dir, err)
		}
		return nil, fmt.Errorf("fetching the backup from the storage: %w", err)
	}
	res.Bytes, res.SHA256 = fetched.N, fetched.Sum()
	if fetched.N != p.Size || fetched.Sum() != p.SHA256 {
		what := fmt.Sprintf("%d bytes (sha256 %s)", fetched.N, fetched.Sum())
		if fetched.N > p.Size {
			what = fmt.Sprintf("more than %d bytes", p.Size)
		}
		return nil, fmt.Errorf("%w: the storage returned %s, the backup was %d (sha256 %s); nothing was loaded", errChecksum, what,
			p.Size, p.SHA256)
	}
	res.ChecksumOK = true
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	ok = true
	return f, nil
}

// removeStaged closes and deletes a fetched object's file.
func removeStaged(f *os.File) {
	f.Close()
	os.Remove(f.Name())
}

// freeBytes is the space an unprivileged writer has left on the
// filesystem of path.
func freeBytes(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Clean(path), &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

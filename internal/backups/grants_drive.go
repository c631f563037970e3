package backups

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
)

// The cloud drive cannot narrow a token to one file: a drive.file token
// reaches every file the application made. So a server gets none. The
// control plane opens each upload's resumable session itself and hands
// over only the session's URI, which can send the content of that one
// file and nothing else; it reads records, lists and deletes itself, and
// streams downloads to the agent (StorageObject). The session URI is
// valid as long as the provider keeps it (a week for Google Drive): that
// is the one grant here not bounded by the job's deadline.

// driveStore is the store of the settings' folder with a fresh access
// token.
func (s *Service) driveStore(ctx context.Context, st Settings) (*objstore.Drive, error) {
	if s.drive == nil || !s.drive.Configured() {
		return nil, fault.Conflictf("clouddrive-unavailable",
			"Backups go to the cloud drive, but no cloud drive is configured on this control plane.")
	}
	token, _, err := s.drive.AccessToken(ctx)
	if err != nil {
		return nil, err
	}
	d, err := objstore.OpenDrive(ctx, objstore.DriveConfig{APIURL: s.drive.APIURL(), Token: token, Folder: st.Folder})
	if err != nil {
		return nil, driveFault("opening the backup folder", err)
	}
	return d, nil
}

// driveFault is a failure of the provider, with its message (never a
// token).
func driveFault(doing string, err error) error {
	return &fault.Error{Kind: fault.Upstream, Code: "provider-failed",
		Message: fmt.Sprintf("The cloud drive failed while %s: %v", doing, err), Err: err}
}

// grantDrive answers req on the cloud drive: an upload's session URI,
// or the outcome of a head, list or delete done here.
func (s *Service) grantDrive(ctx context.Context, st Settings, req agentproto.StorageGrantRequest) (agentproto.StorageGrant, error) {
	d, err := s.driveStore(ctx, st)
	if err != nil {
		return agentproto.StorageGrant{}, err
	}
	switch req.Op {
	case agentproto.StorageOpPut:
		size := req.Size
		if size == 0 {
			size = -1 // an empty object is announced as unknown; the last chunk says 0
		}
		session, err := d.Session(ctx, req.Key, size)
		if err != nil {
			return agentproto.StorageGrant{}, driveFault("opening an upload", err)
		}
		return agentproto.StorageGrant{Method: http.MethodPut, URL: session}, nil
	case agentproto.StorageOpHead:
		o, err := d.Stat(ctx, req.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			return agentproto.StorageGrant{}, nil
		}
		if err != nil {
			return agentproto.StorageGrant{}, driveFault("reading a file's record", err)
		}
		return agentproto.StorageGrant{Found: true, Object: &agentproto.BackupObject{Key: o.Key, Size: o.Size, SHA256: o.SHA256}}, nil
	case agentproto.StorageOpList:
		list, err := d.List(ctx, req.Key)
		if err != nil {
			return agentproto.StorageGrant{}, driveFault("listing the folder", err)
		}
		g := agentproto.StorageGrant{Objects: []agentproto.BackupObject{}}
		for _, o := range list {
			g.Objects = append(g.Objects, agentproto.BackupObject{Key: o.Key, Size: o.Size, SHA256: o.SHA256})
		}
		return g, nil
	case agentproto.StorageOpDelete:
		if err := d.Delete(ctx, req.Key); err != nil {
			return agentproto.StorageGrant{}, driveFault("deleting a file", err)
		}
		return agentproto.StorageGrant{Done: true}, nil
	case agentproto.StorageOpGet:
		return agentproto.StorageGrant{}, fault.Conflictf("storage-op-streamed",
			"A cloud drive object's content is streamed by GET /agent/v1/jobs/{id}/storage?key=….")
	}
	return agentproto.StorageGrant{}, fault.Conflictf("storage-op-unsupported", "The cloud drive has no %s operation.", req.Op)
}

// StorageObject streams the content of a cloud drive object of jobID,
// a job the agent of serverID runs, with its size.
func (s *Service) StorageObject(ctx context.Context, serverID, jobID, key string) (io.ReadCloser, int64, error) {
	j, err := s.jobs.Held(ctx, serverID, jobID)
	if err != nil {
		return nil, 0, err
	}
	sc, payload, err := scopeOf(j)
	if err != nil {
		return nil, 0, err
	}
	if err := sc.allows(payload.Provider, agentproto.StorageGrantRequest{Op: agentproto.StorageOpGet, Key: key}); err != nil {
		return nil, 0, err
	}
	st, err := s.store.BackupSettings(ctx)
	if err != nil && !fault.Is(err, fault.NotFound) {
		return nil, 0, err
	}
	if err != nil || st.Provider != agentproto.BackupProviderCloudDrive || payload.Provider != st.Provider {
		return nil, 0, fault.Conflictf("storage-not-streamed",
			"Only cloud drive objects are streamed through the control plane; an S3 object is read with a presigned GET.")
	}
	d, err := s.driveStore(ctx, st)
	if err != nil {
		return nil, 0, err
	}
	rc, o, err := d.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, 0, fault.NotFoundf("No such object in the storage.")
	}
	if err != nil {
		return nil, 0, driveFault("downloading a file", err)
	}
	return rc, o.Size, nil
}

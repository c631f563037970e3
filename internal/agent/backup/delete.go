package backup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// delete runs backup.delete: the local copy, then the object in the
// storage, each reported; the object is stated afterwards so that a
// storage that answers a delete without deleting is not believed.
func (e Executors) delete(ctx context.Context, c agent.Call[agentproto.BackupDeletePayload]) (agentproto.BackupDeleteResult, error) {
	p, secrets, events := c.Payload, c.Secrets, c.Events
	var res agentproto.BackupDeleteResult
	res.Local = deleteLocal(p)
	if res.Local.OK {
		events.Emit(agentproto.LevelInfo, "local copy deleted", nil)
	} else {
		events.Emit(agentproto.LevelError, "deleting the local copy: "+res.Local.Error, nil)
	}
	res.Remote = e.deleteRemote(ctx, p, secrets)
	if res.Remote.OK {
		events.Emit(agentproto.LevelInfo, "stored object deleted", nil)
	} else {
		events.Emit(agentproto.LevelError, "deleting the stored object: "+res.Remote.Error, nil)
	}
	switch {
	case !res.Remote.OK:
		return res, fmt.Errorf("deleting the stored object: %s", res.Remote.Error)
	case !res.Local.OK:
		return res, fmt.Errorf("deleting the local copy: %s", res.Local.Error)
	}
	return res, nil
}

// deleteLocal removes the run's local copy: only a regular file whose
// name is the run's id, a '.', and ends in ".age".
func deleteLocal(p agentproto.BackupDeletePayload) agentproto.BackupDeleteStep {
	if p.Local == "" {
		return agentproto.BackupDeleteStep{OK: true, Gone: true}
	}
	name := filepath.Base(p.Local)
	if !filepath.IsAbs(p.Local) || p.RunID == "" || !strings.HasPrefix(name, p.RunID+".") || !strings.HasSuffix(name, ".age") {
		return agentproto.BackupDeleteStep{Error: fmt.Sprintf("%s is not a local copy of backup %s", p.Local, p.RunID)}
	}
	fi, err := os.Lstat(p.Local)
	if errors.Is(err, fs.ErrNotExist) {
		return agentproto.BackupDeleteStep{OK: true, Gone: true}
	}
	if err != nil {
		return agentproto.BackupDeleteStep{Error: err.Error()}
	}
	if !fi.Mode().IsRegular() {
		return agentproto.BackupDeleteStep{Error: fmt.Sprintf("%s is not a regular file", p.Local)}
	}
	if err := os.Remove(p.Local); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return agentproto.BackupDeleteStep{Error: err.Error()}
	}
	return agentproto.BackupDeleteStep{OK: true}
}

func (e Executors) deleteRemote(ctx context.Context, p agentproto.BackupDeletePayload, secrets map[string]string) agentproto.BackupDeleteStep {
	open := e.Open
	if open == nil {
		open = objstore.Open
	}
	st, err := open(ctx, p.Storage, secrets)
	if err != nil {
		return agentproto.BackupDeleteStep{Error: err.Error()}
	}
	_, statErr := st.Stat(ctx, p.Key)
	if errors.Is(statErr, objstore.ErrNotFound) {
		return agentproto.BackupDeleteStep{OK: true, Gone: true}
	}
	if err := st.Delete(ctx, p.Key); err != nil {
		return agentproto.BackupDeleteStep{Error: err.Error()}
	}
	if _, err := st.Stat(ctx, p.Key); !errors.Is(err, objstore.ErrNotFound) {
		if err == nil {
			return agentproto.BackupDeleteStep{Error: "the object is still in the storage after its deletion"}
		}
		return agentproto.BackupDeleteStep{Error: err.Error()}
	}
	return agentproto.BackupDeleteStep{OK: true}
}

// Package backup holds the agent's executors of backup jobs: backup.run
// (a dump, or a Redis/Valkey snapshot, encrypted and uploaded),
// backup.verify and backup.restore (Redis/Valkey in place too), and the
// storage test and deletes. Dumps and loads run as exports and imports do
// (internal/agent/dump).
package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// ProbePrefix is where storage tests write their probe objects.
const ProbePrefix = agentproto.BackupProbePrefix

// probeSize is the size of a probe object.
const probeSize = 256 << 10

// Executors runs backup.storage_test and backup.delete.
type Executors struct {
	// Open opens a job's storage; nil means objstore.Open (which takes
	// no job whose storage requests are granted).
	Open func(context.Context, agentproto.BackupStorage, map[string]string) (objstore.Store, error)
}

// Register adds the storage test to r.
func (e Executors) Register(r agent.Registry) {
	agent.Handle(r, agentproto.BackupStorageTest, e.storageTest)
	agent.Handle(r, agentproto.BackupDelete, e.delete)
}

func (e Executors) storageTest(ctx context.Context, c agent.Call[agentproto.BackupStorageTestPayload]) (agentproto.BackupStorageTestResult, error) {
	p, secrets, events := c.Payload, c.Secrets, c.Events
	open := e.Open
	if open == nil {
		open = objstore.Open
	}
	st, err := open(ctx, p.Storage, secrets)
	if err != nil {
		return agentproto.BackupStorageTestResult{}, err
	}
	probe := make([]byte, probeSize)
	if _, err := rand.Read(probe); err != nil {
		return agentproto.BackupStorageTestResult{}, err
	}
	sum := sha256.Sum256(probe)
	want := hex.EncodeToString(sum[:])
	res := agentproto.BackupStorageTestResult{Key: p.Key, Bytes: probeSize}
	if res.Key == "" {
		res.Key = ProbePrefix + c.Job.ID
	}
	step := func(name string, fn func() error) error {
		start := time.Now()
		err := fn()
		s := agentproto.BackupStorageStep{Step: name, OK: err == nil, DurationMS: time.Since(start).Milliseconds()}
		if err != nil {
			s.Error = err.Error()
			events.Emit(agentproto.LevelError, fmt.Sprintf("%s failed: %s", name, s.Error), nil)
		} else {
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("%s: ok in %d ms", name, s.DurationMS), nil)
		}
		res.Steps = append(res.Steps, s)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	written := false
	err = step(agentproto.BackupStepWrite, func() error {
		o, err := st.Put(ctx, res.Key, bytes.NewReader(probe), probeSize)
		if err != nil {
			return err
		}
		written = true
		if o.Size != probeSize || o.SHA256 != want {
			return fmt.Errorf("the storage recorded %d bytes (sha256 %s) of the %d written (sha256 %s)", o.Size, o.SHA256, probeSize, want)
		}
		return nil
	})
	if err == nil {
		err = step(agentproto.BackupStepRead, func() error {
			rc, _, err := st.Get(ctx, res.Key)
			if err != nil {
				return err
			}
			defer rc.Close()
			h := sha256.New()
			n, err := io.Copy(h, rc)
			if err != nil {
				return err
			}
			if got := hex.EncodeToString(h.Sum(nil)); n != probeSize || got != want {
				return fmt.Errorf("read back %d bytes (sha256 %s), want %d (sha256 %s)", n, got, probeSize, want)
			}
			return nil
		})
	}
	if err == nil {
		err = step(agentproto.BackupStepList, func() error {
			// The probe's own key is the prefix: a storage reached
			// through grants lists nothing wider than the job's objects.
			list, err := st.List(ctx, res.Key)
			if err != nil {
				return err
			}
			for _, o := range list {
				if o.Key == res.Key {
					return nil
				}
			}
			return fmt.Errorf("the listing of %s does not hold it", res.Key)
		})
	}
	if written {
		// Deleted even when a step before failed, so a probe never stays.
		derr := step(agentproto.BackupStepDelete, func() error {
			if err := st.Delete(ctx, res.Key); err != nil {
				return err
			}
			if _, err := st.Stat(ctx, res.Key); !errors.Is(err, objstore.ErrNotFound) {
				if err == nil {
					return errors.New("the probe is still there after its deletion")
				}
				return err
			}
			return nil
		})
		if err == nil {
			err = derr
		}
	}
	return res, err
}

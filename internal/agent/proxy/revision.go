package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/capstan-dev/capstan/internal/agent/atomicfile"
)

// StateFile is the file in Settings.StateDir that keeps the highest proxy
// state revision the agent took to apply, so that a restart of the agent
// does not forget it.
const StateFile = "proxy-state.json"

const revisionStateVersion = 1

// revisionState is StateFile's content.
type revisionState struct {
	Version int `json:"version"`
	// ServerID is the enrollment the revision belongs to: revisions are
	// numbered per server, so a state of another enrollment is ignored.
	ServerID string `json:"server_id"`
	Revision int64  `json:"revision"`
}

// StaleError is a proxy state older than one applied before; it is not
// applied.
type StaleError struct {
	Revision int64 // of the state refused
	Applied  int64 // the highest revision applied
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("proxy state revision %d is older than revision %d, applied already", e.Revision, e.Applied)
}

// IsStale reports whether err is a proxy state refused as older than one
// applied before.
func IsStale(err error) bool {
	var se *StaleError
	return errors.As(err, &se)
}

// Revision returns the highest proxy state revision taken to apply (0:
// none yet), reading the state file on first use.
func (p *Proxy) Revision() (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.loadRevision(); err != nil {
		return 0, err
	}
	return p.revision, nil
}

func (p *Proxy) statePath() string { return filepath.Join(p.settings.StateDir, StateFile) }

// loadRevision reads the state file once. p.mu must be held.
func (p *Proxy) loadRevision() error {
	if p.revisionLoaded || p.settings.StateDir == "" {
		p.revisionLoaded = true
		return nil
	}
	b, err := os.ReadFile(p.statePath())
	if errors.Is(err, os.ErrNotExist) {
		p.revisionLoaded = true
		return nil
	}
	var st revisionState
	if err == nil {
		err = json.Unmarshal(b, &st)
		if err == nil && st.Version != revisionStateVersion {
			err = fmt.Errorf("version %d, want %d", st.Version, revisionStateVersion)
		}
	}
	if err != nil {
		// Applying anything now could take the proxy back in time.
		return fmt.Errorf("reading the applied proxy revision from %s (delete the file to accept any revision): %w", p.statePath(), err)
	}
	if st.ServerID == p.settings.ServerID {
		p.revision = st.Revision
	}
	p.revisionLoaded = true
	return nil
}

// takeRevision admits a state of revision rev, or refuses it as older than
// one taken before (*StaleError). 0 (unknown) is always admitted and
// changes nothing. A higher one is recorded, in the state file first,
// before the state is loaded: if Caddy then refuses it, the same revision
// (or a newer) may still be applied, an older one not. p.mu must be held.
func (p *Proxy) takeRevision(rev int64) error {
	if err := p.loadRevision(); err != nil {
		return err
	}
	if rev == 0 || rev == p.revision {
		return nil
	}
	if rev < p.revision {
		return &StaleError{Revision: rev, Applied: p.revision}
	}
	if p.settings.StateDir != "" {
		if err := os.MkdirAll(p.settings.StateDir, 0o700); err != nil {
			return fmt.Errorf("recording the proxy revision: %w", err)
		}
		b, err := json.Marshal(revisionState{Version: revisionStateVersion, ServerID: p.settings.ServerID, Revision: rev})
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(p.statePath(), b, 0o600); err != nil {
			return fmt.Errorf("recording the proxy revision: %w", err)
		}
	}
	p.revision = rev
	return nil
}

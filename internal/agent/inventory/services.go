package inventory

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// enabledTTL is how long a unit's enablement (UnitFileState) is remembered
// before it is asked again.
const enabledTTL = 5 * time.Minute

// unitConn is what the services collector asks of systemd.
type unitConn interface {
	ListUnitsByPatternsContext(ctx context.Context, states, patterns []string) ([]sddbus.UnitStatus, error)
	// UnitFileState is a unit's enablement: enabled, disabled, static…
	UnitFileState(ctx context.Context, unit string) (string, error)
	Close()
}

// busConn is a unitConn over D-Bus.
type busConn struct{ *sddbus.Conn }

func (c busConn) UnitFileState(ctx context.Context, unit string) (string, error) {
	p, err := c.GetUnitPropertyContext(ctx, unit, "UnitFileState")
	if err != nil {
		return "", err
	}
	s, ok := p.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("UnitFileState of %s is %s, not a string", unit, p.Value.Signature())
	}
	return s, nil
}

// enablement is a remembered UnitFileState.
type enablement struct {
	state string
	at    time.Time
}

// systemdServices lists the service units systemd has loaded, as
// `systemctl list-units --type=service --all` does, over one D-Bus
// connection kept open between collections (reopened after an error).
//
// Units that are neither loaded nor referenced (a disabled service that
// never ran) are not listed: listing unit files makes systemd read every
// unit directory, about half a second of PID 1's CPU per call on a plain
// Debian 12, too much for a check every 30 seconds. Each unit's enablement
// is read once and remembered for enabledTTL, so `systemctl disable` shows
// within five minutes.
type systemdServices struct {
	root string
	// dial connects; the connection lives until ctx ends.
	dial    func(ctx context.Context) (unitConn, error)
	conn    unitConn
	endConn context.CancelFunc // ends conn's context
	enabled map[string]enablement
}

func newSystemdServices(root string) *systemdServices {
	return &systemdServices{
		root: root,
		dial: func(ctx context.Context) (unitConn, error) {
			// The system bus; for root without a bus, systemd's private
			// socket. godbus closes the connection when ctx ends.
			c, err := sddbus.NewWithContext(ctx)
			if err != nil {
				return nil, err
			}
			return busConn{c}, nil
		},
		enabled: map[string]enablement{},
	}
}

// booted reports whether systemd runs as init (sd_booted(3)).
func (s *systemdServices) booted() bool {
	st, err := os.Stat(filepath.Join(s.root, "run/systemd/system"))
	return err == nil && st.IsDir()
}

// list returns the service units, sorted by name, or nil, nil when the host
// does not run systemd.
func (s *systemdServices) list(ctx context.Context, now time.Time) ([]agentproto.ServiceInfo, error) {
	if s.conn == nil {
		if !s.booted() {
			return nil, nil
		}
		// The connection outlives this collection: its context ends at
		// close, or now if connecting takes longer than ctx allows.
		connCtx, end := context.WithCancel(context.Background())
		stop := context.AfterFunc(ctx, end)
		c, err := s.dial(connCtx)
		if !stop() || err != nil {
			end()
			if err == nil {
				c.Close()
				err = ctx.Err()
			}
			return nil, err
		}
		s.conn, s.endConn = c, end
	}
	units, err := s.conn.ListUnitsByPatternsContext(ctx, []string{}, []string{"*.service"})
	if err != nil {
		s.close()
		return nil, err
	}
	out := make([]agentproto.ServiceInfo, 0, len(units))
	seen := make(map[string]bool, len(units))
	for _, u := range units {
		// A unit only referenced (by a Wants= or an alias) that has no
		// unit file and does not run is noise.
		if u.LoadState == "not-found" && u.ActiveState == "inactive" {
			continue
		}
		seen[u.Name] = true
		out = append(out, agentproto.ServiceInfo{
			Name:        u.Name,
			Description: u.Description,
			LoadState:   u.LoadState,
			ActiveState: u.ActiveState,
			SubState:    u.SubState,
			Enabled:     s.enablement(ctx, u.Name, u.LoadState, now),
		})
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for name := range s.enabled {
		if !seen[name] {
			delete(s.enabled, name)
		}
	}
	slices.SortFunc(out, func(a, b agentproto.ServiceInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// enablement returns a unit's UnitFileState (enabled, disabled, static,
// masked…), "" if unknown.
func (s *systemdServices) enablement(ctx context.Context, unit, loadState string, now time.Time) string {
	if loadState == "not-found" {
		return ""
	}
	if e, ok := s.enabled[unit]; ok && now.Sub(e.at) < enabledTTL {
		return e.state
	}
	state, err := s.conn.UnitFileState(ctx, unit)
	if err != nil {
		return ""
	}
	s.enabled[unit] = enablement{state: state, at: now}
	return state
}

func (s *systemdServices) close() {
	if s.conn != nil {
		s.conn.Close()
		s.endConn()
		s.conn, s.endConn = nil, nil
	}
}

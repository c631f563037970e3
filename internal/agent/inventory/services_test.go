package inventory

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// fakeSystemd is a unitConn.
type fakeSystemd struct {
	units    []sddbus.UnitStatus
	states   map[string]string // UnitFileState
	listErr  error
	getCalls int
	closed   bool
}

func (f *fakeSystemd) ListUnitsByPatternsContext(_ context.Context, states, patterns []string) ([]sddbus.UnitStatus, error) {
	if len(states) != 0 || !slices.Equal(patterns, []string{"*.service"}) {
		return nil, errors.New("unexpected filter")
	}
	return f.units, f.listErr
}

func (f *fakeSystemd) UnitFileState(_ context.Context, unit string) (string, error) {
	f.getCalls++
	s, ok := f.states[unit]
	if !ok {
		return "", errors.New("no such unit")
	}
	return s, nil
}

func (f *fakeSystemd) Close() { f.closed = true }

// bootedRoot is a host root where systemd runs as init.
func bootedRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestSystemdServices(t *testing.T) {
	fake := &fakeSystemd{
		units: []sddbus.UnitStatus{
			{Name: "ssh.service", Description: "OpenBSD Secure Shell server", LoadState: "loaded", ActiveState: "active", SubState: "running"},
			{Name: "auditd.service", Description: "auditd.service", LoadState: "not-found", ActiveState: "inactive", SubState: "dead"},
			{Name: "cron.service", Description: "Regular background program processing daemon", LoadState: "loaded", ActiveState: "failed", SubState: "failed"},
			{Name: "gone.service", Description: "gone.service", LoadState: "not-found", ActiveState: "active", SubState: "running"},
			{Name: "console-getty.service", Description: "console-getty.service", LoadState: "masked", ActiveState: "inactive", SubState: "dead"},
		},
		states: map[string]string{"ssh.service": "enabled", "cron.service": "disabled", "console-getty.service": "masked"},
	}
	s := newSystemdServices(bootedRoot(t))
	dials := 0
	var connCtx context.Context
	s.dial = func(ctx context.Context) (unitConn, error) { dials++; connCtx = ctx; return fake, nil }
	now := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	got, err := s.list(ctx, now)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	// The connection outlives the collection's context (godbus closes a
	// connection when the context it was made with ends).
	if connCtx.Err() != nil {
		t.Fatal("the connection's context ended with the collection's")
	}
	want := []agentproto.ServiceInfo{
		{Name: "console-getty.service", Description: "console-getty.service", LoadState: "masked", ActiveState: "inactive", SubState: "dead", Enabled: "masked"},
		{Name: "cron.service", Description: "Regular background program processing daemon", LoadState: "loaded", ActiveState: "failed", SubState: "failed", Enabled: "disabled"},
		// Not found but running: kept (its unit file was removed).
		{Name: "gone.service", Description: "gone.service", LoadState: "not-found", ActiveState: "active", SubState: "running"},
		{Name: "ssh.service", Description: "OpenBSD Secure Shell server", LoadState: "loaded", ActiveState: "active", SubState: "running", Enabled: "enabled"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("services:\n got %+v\nwant %+v", got, want)
	}
	if got, want := fake.getCalls, 3; got != want {
		t.Fatalf("%d UnitFileState reads, want %d", got, want)
	}

	// Within the TTL, enablement is remembered; after it, read again.
	fake.states["ssh.service"] = "disabled"
	if got, _ := s.list(context.Background(), now.Add(time.Minute)); got[3].Enabled != "enabled" || fake.getCalls != 3 {
		t.Fatalf("within the TTL: enabled %q after %d reads, want the remembered one and no read", got[3].Enabled, fake.getCalls)
	}
	if got, _ := s.list(context.Background(), now.Add(enabledTTL)); got[3].Enabled != "disabled" || fake.getCalls != 6 {
		t.Fatalf("after the TTL: enabled %q after %d reads, want disabled after 6", got[3].Enabled, fake.getCalls)
	}
	if got, want := dials, 1; got != want {
		t.Fatalf("%d connections, want %d (kept open)", got, want)
	}

	// A failing connection is closed and made again next time.
	fake.listErr = errors.New("connection reset")
	if got, err := s.list(context.Background(), now); err == nil || got != nil {
		t.Fatalf("list with a broken bus = %v, %v; want nil and an error", got, err)
	}
	if !fake.closed || connCtx.Err() == nil {
		t.Error("broken connection not closed, or its context not ended")
	}
	fake.listErr = nil
	if _, err := s.list(context.Background(), now); err != nil || dials != 2 {
		t.Fatalf("after reconnecting: err %v, %d dials; want nil, 2", err, dials)
	}
}

func TestSystemdServicesDialTimesOut(t *testing.T) {
	s := newSystemdServices(bootedRoot(t))
	s.dial = func(ctx context.Context) (unitConn, error) {
		<-ctx.Done() // a bus that never answers, until the connection is given up
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if got, err := s.list(ctx, time.Now()); got != nil || err == nil || s.conn != nil {
		t.Fatalf("list = %v, %v (conn %v); want nil, an error and no connection", got, err, s.conn)
	}
}

func TestSystemdServicesWithoutSystemd(t *testing.T) {
	s := newSystemdServices(t.TempDir())
	s.dial = func(context.Context) (unitConn, error) {
		t.Fatal("dialled D-Bus on a host without systemd")
		return nil, nil
	}
	got, err := s.list(context.Background(), time.Now())
	if got != nil || err != nil {
		t.Fatalf("list = %v, %v; want nil, nil (not known, no error)", got, err)
	}
}

func TestSystemdServicesDialError(t *testing.T) {
	s := newSystemdServices(bootedRoot(t))
	s.dial = func(context.Context) (unitConn, error) { return nil, errors.New("permission denied") }
	if got, err := s.list(context.Background(), time.Now()); got != nil || err == nil {
		t.Fatalf("list = %v, %v; want nil and the error", got, err)
	}
}

// TestSystemdServicesOnThisHost runs where systemd is init (a real server,
// or this test binary run inside a systemd-nspawn container).
func TestSystemdServicesOnThisHost(t *testing.T) {
	s := newSystemdServices("/")
	if !s.booted() {
		t.Skip("systemd is not init here")
	}
	defer s.close()
	// Twice, each with a context that ends: the connection must survive.
	var got []agentproto.ServiceInfo
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), partTimeout)
		var err error
		got, err = s.list(ctx, time.Now())
		cancel()
		if err != nil || got == nil {
			t.Fatalf("collection %d: %d services, %v", i, len(got), err)
		}
	}
	i := slices.IndexFunc(got, func(s agentproto.ServiceInfo) bool { return s.Name == "systemd-journald.service" })
	if i < 0 {
		t.Fatalf("systemd-journald.service not listed among %d services", len(got))
	}
	if j := got[i]; j.LoadState != "loaded" || j.ActiveState != "active" || j.SubState != "running" || j.Enabled != "static" || j.Description == "" {
		t.Errorf("journald = %+v, want loaded, active, running, static, described", j)
	}
	t.Logf("%d services; journald %+v", len(got), got[i])
}

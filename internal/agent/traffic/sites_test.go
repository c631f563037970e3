package traffic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// siteList is a SiteSource the test edits.
type siteList struct {
	mu    sync.Mutex
	hosts []string
	err   error
	reads int
}

func (s *siteList) SiteHosts(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return s.hosts, s.err
}

func (s *siteList) set(err error, hosts ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hosts, s.err = hosts, err
}

// strictPlane validates like the control plane before it skipped bad
// entries: a report with an entry whose host is not a hostname is refused
// whole (422), naming the entry. It keeps the latest minutes and the
// other bucket.
type strictPlane struct {
	latest map[string]agentproto.RequestMinute // "host minute"
	other  map[time.Time]agentproto.RequestMinute
	posts  int
}

func (c *strictPlane) PostRequests(_ context.Context, rep agentproto.RequestsReport) (agentproto.RequestsResult, error) {
	c.posts++
	var bad []agentproto.ProblemField
	for i, m := range rep.Minutes {
		if m.Host == "" || strings.Trim(m.Host, "0123456789.") == "" {
			bad = append(bad, agentproto.ProblemField{Field: fmt.Sprintf("minutes[%d].host", i), Message: "must be a hostname"})
		}
	}
	if len(bad) > 0 {
		return agentproto.RequestsResult{}, &agent.APIError{Method: "POST", Path: "/requests", Status: http.StatusUnprocessableEntity,
			Problem: agentproto.Problem{Status: 422, Detail: "invalid", Errors: bad}}
	}
	for _, m := range rep.Minutes {
		c.latest[m.Host+" "+m.Minute.Format(time.RFC3339)] = m
	}
	for _, m := range rep.Other {
		c.other[m.Minute] = m
	}
	return agentproto.RequestsResult{Stored: len(rep.Minutes) + len(rep.Other)}, nil
}

func newStrictPlane() *strictPlane {
	return &strictPlane{latest: map[string]agentproto.RequestMinute{}, other: map[time.Time]agentproto.RequestMinute{}}
}

func (c *strictPlane) count(host string) (n int64) {
	for _, m := range c.latest {
		if m.Host == host {
			n += m.Count
		}
	}
	return n
}

func (c *strictPlane) otherCount() (n int64) {
	for _, m := range c.other {
		n += m.Count
	}
	return n
}

// Requests to hosts that are not configured sites (a scanner's IP
// literal, random names, no Host at all) are summed into the other
// bucket; the site's counts stay exact and no junk host is reported by
// name.
func TestJunkHostsGoToOther(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	sites := &siteList{hosts: []string{"app.test", "www.app.test"}}
	r := New(Options{LogPath: logPath, StateDir: filepath.Join(dir, "state"), Now: func() time.Time { return t0 }, Sites: sites})
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	at := t0.Add(time.Second)
	var want, wantOther int64
	for i := range 60 {
		at = at.Add(500 * time.Millisecond)
		switch i % 4 {
		case 0, 1:
			b.WriteString(logLine(at, "App.test:443", 200, 10, time.Millisecond))
			want++
		case 2:
			b.WriteString(logLine(at, "203.0.113.9", 404, 10, time.Millisecond))
			wantOther++
		case 3:
			b.WriteString(logLine(at, fmt.Sprintf("x%d.scan.example", i), 404, 10, time.Millisecond))
			wantOther++
		}
	}
	b.WriteString(logLine(at, "", 400, 0, time.Millisecond))
	wantOther++
	appendFile(t, logPath, b.String())

	cp := newStrictPlane()
	r.poll(context.Background())
	if err := r.flush(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	if got := cp.count("app.test"); got != want {
		t.Errorf("app.test: got %d requests, want %d", got, want)
	}
	if got := cp.otherCount(); got != wantOther {
		t.Errorf("other: got %d requests, want %d", got, wantOther)
	}
	for k := range cp.latest {
		if !strings.HasPrefix(k, "app.test ") {
			t.Errorf("reported by name: %s", k)
		}
	}
	if cp.posts != 1 {
		t.Errorf("posts: got %d, want 1", cp.posts)
	}
	// Junk hosts do not make the proxy's configuration be read again
	// and again: a scanner must not turn into a stream of admin reads.
	for range 5 {
		appendFile(t, logPath, logLine(at, "203.0.113.9", 404, 10, time.Millisecond))
		wantOther++
		r.poll(context.Background())
	}
	if got := sites.reads; got != 1 {
		t.Errorf("the sites were read %d times during polls of junk hosts, want once", got)
	}

	// A site added since the list was read is counted under its name
	// from its first line: the proxy's load of it marks the list stale.
	sites.set(nil, "app.test", "www.app.test", "new.test")
	r.SitesChanged()
	appendFile(t, logPath, logLine(at.Add(time.Second), "new.test", 200, 5, time.Millisecond))
	r.poll(context.Background())
	if err := r.flush(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	if got := cp.count("new.test"); got != 1 {
		t.Errorf("new.test: got %d requests, want 1", got)
	}
	if got := cp.otherCount(); got != wantOther {
		t.Errorf("other after new.test: got %d requests, want %d", got, wantOther)
	}
}

// Until the sites are known the log is not read; once they are, every
// line is counted.
func TestSitesUnknownWaits(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	var logs bytes.Buffer
	sites := &siteList{err: errors.New("caddy down")}
	r := New(Options{LogPath: logPath, StateDir: filepath.Join(dir, "state"), Now: func() time.Time { return t0 }, Sites: sites,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	appendFile(t, logPath, logLine(t0.Add(time.Second), "app.test", 200, 1, time.Millisecond)+
		logLine(t0.Add(2*time.Second), "203.0.113.9", 200, 1, time.Millisecond))
	cp := newStrictPlane()
	r.poll(context.Background())
	if err := r.flush(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	if len(cp.latest)+len(cp.other) != 0 {
		t.Fatalf("counted before the sites were known: %v %v", cp.latest, cp.other)
	}
	if !strings.Contains(logs.String(), "caddy down") {
		t.Errorf("the failure is not logged: %s", logs.String())
	}
	sites.set(nil, "app.test")
	r.poll(context.Background())
	if err := r.flush(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	if cp.count("app.test") != 1 || cp.otherCount() != 1 {
		t.Errorf("got app.test %d, other %d; want 1 and 1", cp.count("app.test"), cp.otherCount())
	}
}

// A control plane that refuses a whole report for one bad entry: the
// entry is logged with what was wrong and left out, and the rest is
// stored.
func TestRefusedEntryLoggedRestSent(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	if err := os.WriteFile(logPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	// No site source: every host is reported by name, as an agent
	// without one would.
	r := New(Options{LogPath: logPath, StateDir: filepath.Join(dir, "state"), Now: func() time.Time { return t0 },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	appendFile(t, logPath, logLine(t0.Add(time.Second), "app.test", 200, 1, time.Millisecond)+
		logLine(t0.Add(2*time.Second), "203.0.113.9", 200, 1, time.Millisecond)+
		logLine(t0.Add(3*time.Second), "app.test", 200, 1, time.Millisecond))
	cp := newStrictPlane()
	r.poll(context.Background())
	if err := r.flush(context.Background(), cp); err != nil {
		t.Fatal(err)
	}
	if got := cp.count("app.test"); got != 2 {
		t.Errorf("app.test: got %d requests, want 2", got)
	}
	if cp.posts != 2 {
		t.Errorf("posts: got %d, want 2 (refused, then the rest)", cp.posts)
	}
	l := logs.String()
	if !strings.Contains(l, "host=203.0.113.9") || !strings.Contains(l, "field=minutes[0].host") && !strings.Contains(l, "field=minutes[1].host") {
		t.Errorf("the refused entry is not logged with its host and field:\n%s", l)
	}
}

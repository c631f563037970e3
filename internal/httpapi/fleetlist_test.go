package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/notify"
)

// fleetEnv is a control plane with n enrolled servers named web-0 …,
// each with a sample every 15 s over the last hour (server i at i % 100
// percent CPU), and a signed-in administrator.
func fleetEnv(t *testing.T, n int) (*testEnv, string, []string) {
	t.Helper()
	return fleetEnvAt(t, n, -1)
}

// fleetEnvAt is fleetEnv with the clock moved first, when offset is not
// negative, to that far into a two-minute slot.
func fleetEnvAt(t *testing.T, n int, offset time.Duration) (*testEnv, string, []string) {
	t.Helper()
	e := newTestEnv(t, envOptions{}).serve(t)
	if offset >= 0 {
		slot := 2 * time.Minute
		now := e.clock.Now()
		e.clock.Advance(now.Truncate(slot).Add(slot + offset).Sub(now))
	}
	admin, secret := e.createUser(t, "admin@example.com", true)
	token, _ := e.signIn(t, admin.Email, secret)
	d := e.srv.deps
	ctx := context.Background()
	c := audit.Caller{Actor: audit.Actor{Type: audit.ActorUser, ID: admin.ID, Email: admin.Email}, IP: "127.0.0.1"}
	var ids []string
	for i := range n {
		en, err := d.Servers.CreateEnrollment(ctx, c, fmt.Sprintf("web-%d", i), []string{"web", fmt.Sprintf("rack-%d", i%3)})
		if err != nil {
			t.Fatal(err)
		}
		res, err := d.Servers.Enroll(ctx, c, agentproto.EnrollRequest{Token: en.Token,
			Facts: agentproto.Facts{Hostname: fmt.Sprintf("web-%d.example", i), OS: "debian", OSVersion: "12", AgentVersion: "1.2.3"}})
		if err != nil {
			t.Fatal(err)
		}
		var samples []agentproto.MetricSample
		for at := e.clock.Now().Add(-time.Hour + 15*time.Second); !at.After(e.clock.Now()); at = at.Add(15 * time.Second) {
			samples = append(samples, agentproto.MetricSample{At: at, CPUPercent: float64(i%100) + 0.04, MemoryTotal: 1000, MemoryUsed: 500,
				MemoryAvailable: 500, Filesystems: []agentproto.FilesystemSample{{Mount: "/", BytesTotal: 100, BytesUsed: 33}}})
		}
		if _, err := d.Metrics.Ingest(ctx, res.ServerID, agentproto.MetricsRequest{Samples: samples}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ServerID)
	}
	return e, token, ids
}

// TestServersCompact: the compact list has an entry per server in every
// column, matching the full list, and is far smaller.
func TestServersCompact(t *testing.T) {
	e, token, ids := fleetEnv(t, 5)
	full := e.request(t, http.MethodGet, "/api/v1/servers", token, nil)
	expectStatus(t, full, http.StatusOK)
	r := e.request(t, http.MethodGet, "/api/v1/servers/compact", token, nil)
	expectStatus(t, r, http.StatusOK)
	var c ServerColumns
	r.decode(t, &c)
	if c.Count != 5 {
		t.Fatalf("count %d, want 5", c.Count)
	}
	for name, n := range map[string]int{"id": len(c.ID), "name": len(c.Name), "status": len(c.Status), "tags": len(c.Tags),
		"hostname": len(c.Hostname), "os": len(c.OS), "last_seen": len(c.LastSeen), "cpu": len(c.CPU), "memory": len(c.Memory), "disk": len(c.Disk)} {
		if n != c.Count {
			t.Fatalf("column %s has %d entries, want %d", name, n, c.Count)
		}
	}
	var list struct {
		Servers []ServerSummary `json:"servers"`
	}
	full.decode(t, &list)
	for i, s := range list.Servers {
		if c.ID[i] != s.ID || c.Name[i] != s.Name || c.Status[i] != s.Status || strings.Join(c.Tags[i], ",") != strings.Join(s.Tags, ",") ||
			c.Hostname[i] != s.Facts.Hostname || c.OS[i] != "debian 12" || c.LastSeen[i] == nil || *c.LastSeen[i] != s.LastSeenAt.Unix() {
			t.Fatalf("entry %d: %+v, server %+v", i, c, s)
		}
		cpu := float64(i%100) + 0.04
		if *c.CPU[i] != float64(int(cpu*10+0.5))/10 || *c.Memory[i] != 50 || *c.Disk[i] != 33 {
			t.Fatalf("entry %d metrics: cpu %v memory %v disk %v", i, *c.CPU[i], *c.Memory[i], *c.Disk[i])
		}
	}
	if len(r.body)*3 > len(full.body) {
		t.Fatalf("compact list is %d bytes, the full one %d: want at most a third", len(r.body), len(full.body))
	}
	_ = ids
}

// TestServerSparklines: 30 two-minute slots of whole percentages for the
// servers asked, in their order; unknown ids are left out; no ids, or
// more than 100, are a 422.
func TestServerSparklines(t *testing.T) {
	// Every slot has samples (one every 15 s), wherever in its two
	// minutes the clock is.
	for _, offset := range []time.Duration{0, 7 * time.Second, 15 * time.Second, 16 * time.Second, time.Minute, 119 * time.Second} {
		t.Run(offset.String(), func(t *testing.T) { testServerSparklines(t, offset) })
	}
}

func testServerSparklines(t *testing.T, offset time.Duration) {
	e, token, ids := fleetEnvAt(t, 3, offset)
	r := e.request(t, http.MethodGet, "/api/v1/servers/sparklines?ids="+ids[2]+",srv_nope,"+ids[0], token, nil)
	expectStatus(t, r, http.StatusOK)
	var got struct {
		SlotSeconds int `json:"slot_seconds"`
		Servers     []struct {
			ServerID string `json:"server_id"`
			CPU      []*int `json:"cpu"`
			Memory   []*int `json:"memory"`
		} `json:"servers"`
	}
	r.decode(t, &got)
	if got.SlotSeconds != 120 || len(got.Servers) != 2 || got.Servers[0].ServerID != ids[2] || got.Servers[1].ServerID != ids[0] {
		t.Fatalf("sparklines: %s", r.body)
	}
	for _, s := range got.Servers {
		want := 0
		if s.ServerID == ids[2] {
			want = 2
		}
		if len(s.CPU) != 30 || len(s.Memory) != 30 {
			t.Fatalf("%s: %d and %d points", s.ServerID, len(s.CPU), len(s.Memory))
		}
		for i := range 30 {
			if s.CPU[i] == nil || *s.CPU[i] != want || s.Memory[i] == nil || *s.Memory[i] != 50 {
				t.Fatalf("%s slot %d: %s", s.ServerID, i, r.body)
			}
		}
	}
	many := strings.TrimSuffix(strings.Repeat(ids[0]+",", 101), ",")
	for _, q := range []string{"", "?ids=", "?ids=,,", "?ids=" + many} {
		expectProblem(t, e.request(t, http.MethodGet, "/api/v1/servers/sparklines"+q, token, nil), http.StatusUnprocessableEntity, "validation-failed")
	}
}

// TestJSONIsCompressed: a client that accepts gzip gets large JSON
// answers compressed (and the same JSON after decompression); small
// answers, clients that do not accept gzip and the live stream are sent
// as they are.
func TestJSONIsCompressed(t *testing.T) {
	e, token, _ := fleetEnv(t, 20)
	get := func(path, encoding string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if encoding != "" {
			req.Header.Set("Accept-Encoding", encoding)
		}
		// A transport that does not ask for gzip by itself.
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	plainResp, plain := get("/api/v1/servers", "")
	if plainResp.Header.Get("Content-Encoding") != "" || !json.Valid(plain) {
		t.Fatalf("without Accept-Encoding: %v", plainResp.Header)
	}
	resp, zipped := get("/api/v1/servers", "br, gzip;q=0.8")
	if resp.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") ||
		resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("with gzip: %v", resp.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(zipped))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(unzipped) || len(unzipped) != len(plain) || len(zipped)*4 > len(plain) {
		t.Fatalf("gzip: %d bytes for %d of JSON (%d without gzip)", len(zipped), len(unzipped), len(plain))
	}
	if resp, _ := get("/api/v1/servers", "gzip;q=0"); resp.Header.Get("Content-Encoding") != "" {
		t.Fatal("gzip;q=0 was compressed")
	}
	if resp, _ := get("/api/v1/auth/me", "gzip"); resp.Header.Get("Content-Encoding") != "" {
		t.Fatal("a small answer was compressed")
	}
	// The stream: its first bytes arrive uncompressed, as they are written.
	tk := e.request(t, http.MethodPost, "/api/v1/stream/tickets", token, nil)
	expectStatus(t, tk, http.StatusCreated)
	var ticket struct {
		Ticket string `json:"ticket"`
	}
	tk.decode(t, &ticket)
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/api/v1/stream?ticket="+ticket.Ticket, nil)
	req.Header.Set("Accept-Encoding", "gzip")
	sresp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	first := make([]byte, len(": capstan stream"))
	if _, err := io.ReadFull(sresp.Body, first); err != nil || sresp.Header.Get("Content-Encoding") != "" || string(first) != ": capstan stream" {
		t.Fatalf("stream: %v %q %v", err, first, sresp.Header)
	}
}

// TestPlatformCountsAgentVersions: the platform answer counts enrolled
// servers by agent version.
func TestPlatformCountsAgentVersions(t *testing.T) {
	e, token, _ := fleetEnv(t, 2)
	r := e.request(t, http.MethodGet, "/api/v1/platform", token, nil)
	expectStatus(t, r, http.StatusOK)
	var p PlatformInfo
	r.decode(t, &p)
	if len(p.Agents) != 1 || p.Agents[0].Version != "1.2.3" || p.Agents[0].Servers != 2 || p.Agents[0].Online != 2 || p.Version != "test" {
		t.Fatalf("platform: %s", r.body)
	}
}

// TestEmailSettingsNeverShowThePassword: the SMTP settings come without
// the password; a test e-mail without SMTP is a 409, a bad address a 422.
func TestEmailSettingsNeverShowThePassword(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	d := e.srv.deps
	d.SMTP = notify.SMTP{Host: "127.0.0.1", Port: 1, Security: notify.SMTPNone, User: "mailer", Password: "hunter2-secret", From: "capstan@example.com"}
	e.srv = New(d)
	e.serve(t)
	admin, secret := e.createUser(t, "admin@example.com", true)
	token, _ := e.signIn(t, admin.Email, secret)
	r := e.request(t, http.MethodGet, "/api/v1/notifications/email", token, nil)
	expectStatus(t, r, http.StatusOK)
	if strings.Contains(string(r.body), "hunter2") {
		t.Fatalf("the settings show the password: %s", r.body)
	}
	var s notify.SMTPSettings
	r.decode(t, &s)
	if !s.Enabled || s.Host != "127.0.0.1" || s.User != "mailer" || !s.PasswordSet || s.From != "capstan@example.com" {
		t.Fatalf("settings: %s", r.body)
	}
	expectProblem(t, e.request(t, http.MethodPost, "/api/v1/notifications/email/test", token, map[string]any{"to": "not an address"}),
		http.StatusUnprocessableEntity, "validation-failed")
	// Port 1 refuses: the answer says so, and the attempt is audited.
	r = e.request(t, http.MethodPost, "/api/v1/notifications/email/test", token, map[string]any{"to": "ops@example.com"})
	expectStatus(t, r, http.StatusOK)
	var res notify.MailTestResult
	r.decode(t, &res)
	if res.Delivered || res.Error == "" || res.To != "ops@example.com" {
		t.Fatalf("test to a closed port: %s", r.body)
	}
	entries, _, err := d.Audit.List(context.Background(), 10, "", "notification.email.tested")
	if err != nil || len(entries) != 1 || entries[0].Details["delivered"] != false {
		t.Fatalf("audit: %v %+v", err, entries)
	}

	off := newTestEnv(t, envOptions{}).serve(t)
	admin, secret = off.createUser(t, "admin@example.com", true)
	token, _ = off.signIn(t, admin.Email, secret)
	r = off.request(t, http.MethodGet, "/api/v1/notifications/email", token, nil)
	expectStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.body), `"enabled":false`) {
		t.Fatalf("settings without SMTP: %s", r.body)
	}
	expectProblem(t, off.request(t, http.MethodPost, "/api/v1/notifications/email/test", token, map[string]any{"to": "ops@example.com"}),
		http.StatusConflict, "email-not-configured")
}

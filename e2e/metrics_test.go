package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
)

// mxPoint is a point of a metric series as the API shows it.
type mxPoint struct {
	T                 time.Time `json:"t"`
	Samples           int       `json:"samples"`
	CPUPercent        float64   `json:"cpu_percent"`
	CPUPercentMax     float64   `json:"cpu_percent_max"`
	Load1             float64   `json:"load1"`
	MemoryUsedPercent *float64  `json:"memory_used_percent"`
	MemoryUsed        int64     `json:"memory_used"`
	MemoryTotal       int64     `json:"memory_total"`
	SwapUsedPercent   *float64  `json:"swap_used_percent"`
	DiskUsedPercent   *float64  `json:"disk_used_percent"`
	NetRxBytesPerS    float64   `json:"net_rx_bytes_per_s"`
	NetTxBytesPerS    float64   `json:"net_tx_bytes_per_s"`
}

type mxSeries struct {
	ServerID      string    `json:"server_id"`
	Range         string    `json:"range"`
	Resolution    string    `json:"resolution"`
	BucketSeconds int       `json:"bucket_seconds"`
	Series        []mxPoint `json:"series"`
}

type mxLatest struct {
	At                time.Time `json:"at"`
	CPUPercent        float64   `json:"cpu_percent"`
	MemoryUsedPercent *float64  `json:"memory_used_percent"`
	DiskUsedPercent   *float64  `json:"disk_used_percent"`
	Load1             float64   `json:"load1"`
	UptimeSeconds     int64     `json:"uptime_seconds"`
}

type mxServer struct {
	ID            string    `json:"id"`
	Name          string    `json:"name"`
	Status        string    `json:"status"`
	LatestMetrics *mxLatest `json:"latest_metrics"`
	Inventory     *struct {
		CollectedAt time.Time                  `json:"collected_at"`
		ReceivedAt  time.Time                  `json:"received_at"`
		Services    []agentproto.ServiceInfo   `json:"services"`
		Containers  []agentproto.ContainerInfo `json:"containers"`
		Ports       []agentproto.ListeningPort `json:"ports"`
	} `json:"inventory"`
}

type mxFleet struct {
	Range         string `json:"range"`
	Resolution    string `json:"resolution"`
	BucketSeconds int    `json:"bucket_seconds"`
	Summary       struct {
		ServersTotal         int      `json:"servers_total"`
		Online               int      `json:"online"`
		Offline              int      `json:"offline"`
		Pending              int      `json:"pending"`
		Revoked              int      `json:"revoked"`
		CPUPercentAvg        *float64 `json:"cpu_percent_avg"`
		CPUPercentMax        *float64 `json:"cpu_percent_max"`
		MemoryUsedPercentAvg *float64 `json:"memory_used_percent_avg"`
		MemoryUsedPercentMax *float64 `json:"memory_used_percent_max"`
		DiskUsedPercentAvg   *float64 `json:"disk_used_percent_avg"`
		DiskUsedPercentMax   *float64 `json:"disk_used_percent_max"`
	} `json:"summary"`
	Servers []struct {
		ServerID string    `json:"server_id"`
		Name     string    `json:"name"`
		Status   string    `json:"status"`
		Series   []mxPoint `json:"series"`
	} `json:"servers"`
}

// mxEnrollment creates a pending server and returns its id and token.
func mxEnrollment(t *testing.T, cp *ControlPlane, adminToken, name string) (id, token string) {
	t.Helper()
	var e struct {
		Server struct {
			ID string `json:"id"`
		} `json:"server"`
		Token string `json:"token"`
	}
	expectJSON(t, cp.Post(t, "/api/v1/servers/enrollments", adminToken, map[string]any{"name": name}), http.StatusCreated, &e)
	return e.Server.ID, e.Token
}

// mxEnroll enrolls a server over the agent protocol, as an agent would,
// and returns its id and agent token.
func mxEnroll(t *testing.T, cp *ControlPlane, adminToken, name string) (id, agentToken string) {
	t.Helper()
	_, token := mxEnrollment(t, cp, adminToken, name)
	r := cp.Post(t, "/agent/v1/enroll", "", agentproto.EnrollRequest{Token: token,
		Facts: agentproto.Facts{Hostname: name, OS: "debian", Arch: "amd64", AgentVersion: buildVersion}})
	var res agentproto.EnrollResponse
	expectJSON(t, r, http.StatusOK, &res)
	return res.ServerID, res.AgentToken
}

func mxSample(at time.Time, cpu float64) agentproto.MetricSample {
	return agentproto.MetricSample{At: at, CPUPercent: cpu, Load1: cpu / 10, Load5: 0.5, Load15: 0.25,
		MemoryTotal: 4 << 30, MemoryUsed: 1 << 30, MemoryAvailable: 3 << 30, SwapTotal: 0, SwapUsed: 0,
		Filesystems: []agentproto.FilesystemSample{
			{Mount: "/", Device: "/dev/vda1", FSType: "ext4", BytesTotal: 100 << 30, BytesUsed: 40 << 30, InodesTotal: 1 << 20, InodesUsed: 1 << 10},
			{Mount: "/srv", Device: "/dev/vdb1", FSType: "xfs", BytesTotal: 100 << 30, BytesUsed: 90 << 30, InodesTotal: 1 << 20, InodesUsed: 1 << 10},
		},
		NetRxBytesPerS: 1000, NetTxBytesPerS: 500, UptimeSeconds: 86400}
}

func mxSeriesOf(t *testing.T, cp *ControlPlane, token, serverID, rangeName string) mxSeries {
	t.Helper()
	var s mxSeries
	expectJSON(t, cp.Get(t, "/api/v1/servers/"+serverID+"/metrics?range="+rangeName, token), http.StatusOK, &s)
	return s
}

func mxFleetOf(t *testing.T, cp *ControlPlane, token, rangeName string) mxFleet {
	t.Helper()
	var f mxFleet
	expectJSON(t, cp.Get(t, "/api/v1/monitoring/fleet?range="+rangeName, token), http.StatusOK, &f)
	return f
}

func mxFields(p Problem) []string {
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Field)
	}
	return out
}

func mxNear(got *float64, want float64) bool {
	return got != nil && *got > want-1e-9 && *got < want+1e-9
}

func TestMetricsIngestAndViews(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		cp := startControlPlane(t, Options{Dialect: d, Args: []string{"--metrics-rollup-interval", "1s"}})
		admin := newAdmin(t, cp, "admin@example.com")
		token := signInUser(t, cp, admin).AccessToken
		pendingID, _ := mxEnrollment(t, cp, token, "not-yet")
		id, agent := mxEnroll(t, cp, token, "web-1")

		// A buffered batch: one sample from 30 minutes ago, two recent.
		now := time.Now().UTC().Truncate(time.Millisecond)
		times := []time.Time{now.Add(-30 * time.Minute), now.Add(-2 * time.Minute), now.Add(-time.Minute)}
		batch := agentproto.MetricsRequest{Samples: []agentproto.MetricSample{mxSample(times[0], 10), mxSample(times[1], 20), mxSample(times[2], 30)}}
		expectStatus(t, cp.Post(t, "/agent/v1/metrics", agent, batch), http.StatusNoContent)
		// Retried, it counts once.
		expectStatus(t, cp.Post(t, "/agent/v1/metrics", agent, batch), http.StatusNoContent)

		s := mxSeriesOf(t, cp, token, id, "1h")
		if s.ServerID != id || s.Range != "1h" || s.Resolution != "raw" || s.BucketSeconds != 0 || len(s.Series) != 3 {
			t.Fatalf("1h series: %+v", s)
		}
		for i, p := range s.Series {
			if !p.T.Equal(times[i]) || p.Samples != 1 || p.CPUPercent != float64(10*(i+1)) {
				t.Fatalf("point %d: %+v, want t=%s cpu=%d", i, p, times[i], 10*(i+1))
			}
			if !mxNear(p.MemoryUsedPercent, 25) || !mxNear(p.DiskUsedPercent, 90) || p.SwapUsedPercent != nil || p.MemoryTotal != 4<<30 {
				t.Fatalf("point %d: %+v", i, p)
			}
		}
		if def := cp.Get(t, "/api/v1/servers/"+id+"/metrics", token); def.Status != http.StatusOK || !strings.Contains(string(def.Body), `"range":"1h"`) {
			t.Fatalf("without a range: %d %s, want the 1h range", def.Status, def.Body)
		}
		if day := mxSeriesOf(t, cp, token, id, "24h"); len(day.Series) != 3 || day.Resolution != "raw" {
			t.Fatalf("24h series: %+v", day)
		}

		// The list shows each server's latest sample, the detail its
		// inventory too.
		r := cp.Get(t, "/api/v1/servers", token)
		var list struct {
			Servers []mxServer `json:"servers"`
		}
		expectJSON(t, r, http.StatusOK, &list)
		if len(list.Servers) != 2 {
			t.Fatalf("servers: %s", r.Body)
		}
		for _, srv := range list.Servers {
			switch srv.ID {
			case id:
				l := srv.LatestMetrics
				if l == nil || !l.At.Equal(times[2]) || l.CPUPercent != 30 || l.Load1 != 3 || l.UptimeSeconds != 86400 ||
					!mxNear(l.MemoryUsedPercent, 25) || !mxNear(l.DiskUsedPercent, 90) {
					t.Fatalf("latest metrics of %s: %+v", srv.Name, l)
				}
			case pendingID:
				if srv.LatestMetrics != nil || !strings.Contains(string(r.Body), `"latest_metrics":null`) {
					t.Fatalf("a pending server has latest metrics: %s", r.Body)
				}
			}
		}

		collected := now.Add(-10 * time.Second)
		inv := map[string]any{
			"collected_at": collected,
			"services":     []agentproto.ServiceInfo{{Name: "nginx.service", Description: "A high performance web server", LoadState: "loaded", ActiveState: "active", SubState: "running", Enabled: "enabled"}},
			"containers": []map[string]any{{"id": "4f2a9c", "name": "db", "image": "postgres:17", "state": "running", "status": "Up 2 hours",
				"ports": []agentproto.ContainerPort{{IP: "127.0.0.1", HostPort: 5432, ContainerPort: 5432, Protocol: "tcp"}}, "labels": nil, "restart_count": 0}},
			"ports": nil, // not readable
		}
		expectStatus(t, cp.Post(t, "/agent/v1/inventory", agent, inv), http.StatusNoContent)
		r = cp.Get(t, "/api/v1/servers/"+id, token)
		var detail mxServer
		expectJSON(t, r, http.StatusOK, &detail)
		if detail.LatestMetrics == nil || detail.LatestMetrics.CPUPercent != 30 || detail.Inventory == nil {
			t.Fatalf("server detail: %s", r.Body)
		}
		got := detail.Inventory
		if !got.CollectedAt.Equal(collected) || got.ReceivedAt.Before(collected) || len(got.Services) != 1 || got.Services[0].Name != "nginx.service" ||
			len(got.Containers) != 1 || got.Containers[0].Image != "postgres:17" || len(got.Containers[0].Ports) != 1 || got.Ports != nil {
			t.Fatalf("inventory: %s", r.Body)
		}
		r = cp.Get(t, "/api/v1/servers/"+pendingID, token)
		expectStatus(t, r, http.StatusOK)
		if !strings.Contains(string(r.Body), `"inventory":null`) || !strings.Contains(string(r.Body), `"latest_metrics":null`) {
			t.Fatalf("detail of a pending server: %s", r.Body)
		}

		f := mxFleetOf(t, cp, token, "1h")
		sum := f.Summary
		if f.Range != "1h" || f.Resolution != "raw" || f.BucketSeconds <= 0 || sum.ServersTotal != 2 || sum.Online != 1 || sum.Pending != 1 ||
			sum.Offline != 0 || sum.Revoked != 0 || !mxNear(sum.CPUPercentAvg, 30) || !mxNear(sum.CPUPercentMax, 30) ||
			!mxNear(sum.MemoryUsedPercentAvg, 25) || !mxNear(sum.DiskUsedPercentMax, 90) {
			t.Fatalf("fleet: %+v", f)
		}
		var samples int
		for _, srv := range f.Servers {
			if srv.ServerID == id {
				for _, p := range srv.Series {
					samples += p.Samples
				}
			}
		}
		if len(f.Servers) != 2 || samples != 3 {
			t.Fatalf("fleet series: %+v", f.Servers)
		}

		// The rollup loop (every second here) serves the long ranges.
		deadline := time.Now().Add(90 * time.Second)
		for {
			s := mxSeriesOf(t, cp, token, id, "7d")
			var n int
			var cpuSum float64
			for _, p := range s.Series {
				n += p.Samples
				cpuSum += p.CPUPercent * float64(p.Samples)
			}
			if s.Resolution != "1h" || s.BucketSeconds != 3600 {
				t.Fatalf("7d series: %+v", s)
			}
			if n == 3 {
				if cpuSum != 60 {
					t.Fatalf("7d series: cpu sum %v, want 60: %+v", cpuSum, s.Series)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("7d series did not show the 3 samples within 90 s: %+v", s)
			}
			time.Sleep(200 * time.Millisecond)
		}
		for _, rng := range []string{"30d", "90d"} {
			if s := mxSeriesOf(t, cp, token, id, rng); s.Resolution != "1h" || len(s.Series) == 0 {
				t.Fatalf("%s series: %+v", rng, s)
			}
			if f := mxFleetOf(t, cp, token, rng); f.Resolution != "1h" || len(f.Servers) != 2 {
				t.Fatalf("%s fleet: %+v", rng, f)
			}
		}

		// Bad requests.
		for _, path := range []string{"/api/v1/servers/" + id + "/metrics?range=2h", "/api/v1/monitoring/fleet?range=2h"} {
			p := expectProblem(t, cp.Get(t, path, token), http.StatusUnprocessableEntity, "validation-failed")
			if !slices.Contains(mxFields(p), "range") {
				t.Fatalf("GET %s: fields %v, want range", path, mxFields(p))
			}
		}
		expectProblem(t, cp.Get(t, "/api/v1/servers/srv_nope/metrics?range=1h", token), http.StatusNotFound, "not-found")
		expectProblem(t, cp.Get(t, "/api/v1/servers/"+id+"/metrics", ""), http.StatusUnauthorized, "invalid-token")
		expectProblem(t, cp.Post(t, "/agent/v1/metrics", "", batch), http.StatusUnauthorized, "invalid-agent-token")

		// An out-of-range value refuses the whole report.
		bad := agentproto.MetricsRequest{Samples: []agentproto.MetricSample{mxSample(now.Add(-10*time.Second), 40), mxSample(now.Add(-5*time.Second), 150)}}
		p := expectProblem(t, cp.Post(t, "/agent/v1/metrics", agent, bad), http.StatusUnprocessableEntity, "validation-failed")
		if !slices.Equal(mxFields(p), []string{"samples[1].cpu_percent"}) {
			t.Fatalf("cpu 150: fields %v", mxFields(p))
		}
		old := agentproto.MetricsRequest{Samples: []agentproto.MetricSample{mxSample(now.Add(-8*24*time.Hour), 40)}}
		p = expectProblem(t, cp.Post(t, "/agent/v1/metrics", agent, old), http.StatusUnprocessableEntity, "validation-failed")
		if !slices.Equal(mxFields(p), []string{"samples[0].at"}) {
			t.Fatalf("8 days old: fields %v", mxFields(p))
		}
		if s := mxSeriesOf(t, cp, token, id, "1h"); len(s.Series) != 3 {
			t.Fatalf("after refused reports: %d points, want 3", len(s.Series))
		}
		badInv := map[string]any{"collected_at": now, "services": nil, "containers": nil,
			"ports": []agentproto.ListeningPort{{Protocol: "tcp", Address: "0.0.0.0", Port: 70000}}}
		p = expectProblem(t, cp.Post(t, "/agent/v1/inventory", agent, badInv), http.StatusUnprocessableEntity, "validation-failed")
		if !slices.Equal(mxFields(p), []string{"ports[0].port"}) {
			t.Fatalf("port 70000: fields %v", mxFields(p))
		}

		// An oversized body is refused before it is read.
		huge := agentproto.MetricsRequest{Samples: []agentproto.MetricSample{mxSample(now, 1)}}
		raw, err := json.Marshal(huge)
		if err != nil {
			t.Fatal(err)
		}
		raw = bytes.Replace(raw, []byte(`"mount":"/"`), []byte(`"mount":"/`+strings.Repeat("x", 5<<20)+`"`), 1)
		expectProblem(t, cp.Do(t, Req{Method: http.MethodPost, Path: "/agent/v1/metrics", Token: agent, Body: raw, ContentType: "application/json"}),
			http.StatusRequestEntityTooLarge, "body-too-large")
	})
}

package deploy

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

func TestNewName(t *testing.T) {
	for _, c := range []struct{ name, id, dep, want string }{
		{"Web Test", "app_1", "dep_01jx5h3k9w2m4n6p8r0t2v4x6z", "capstan-web-test-0t2v4x6z"},
		{"api", "app_1", "0e6f1b0c-3b1a-4c55-9d43-2c1de4a9b7f1", "capstan-api-e4a9b7f1"},
		{"  ***  ", "App.One", "d1", "capstan-app-one-d1"},
		{strings.Repeat("x", 80), "a", "dep_", "capstan-" + strings.Repeat("x", 40) + "-x"},
		{"Ünïcode Ápp", "a", "dep_ABC", "capstan-n-code-pp-abc"},
	} {
		if got := newName(c.name, c.id, c.dep); got != c.want {
			t.Errorf("newName(%q, %q, %q) = %q, want %q", c.name, c.id, c.dep, got, c.want)
		}
	}
}

func TestRegistryUnreachable(t *testing.T) {
	for msg, want := range map[string]bool{
		`Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such host`: true,
		`Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused`:                                 true,
		`Get "https://ghcr.io/v2/": net/http: TLS handshake timeout`:                                                      true,
		`Get "https://ghcr.io/v2/": dial tcp 140.82.121.33:443: i/o timeout`:                                              true,
		`pull access denied for capstan/web, repository does not exist or may require 'docker login'`:                     false,
		`manifest for ghcr.io/acme/web:v9 not found: manifest unknown: manifest unknown`:                                  false,
		`unauthorized: authentication required`:                                                                           false,
	} {
		if got := registryUnreachable(errors.New(msg)); got != want {
			t.Errorf("registryUnreachable(%q) = %v, want %v", msg, got, want)
		}
	}
}

func TestSameImage(t *testing.T) {
	full := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{full, full, true},
		{full, strings.Repeat("ab", 32), true},
		{full, "abababababab", true},
		{full, "sha256:abababababab", true},
		{full, "abab", false},
		{full, "sha256:" + strings.Repeat("cd", 32), false},
		{"", full, false},
	} {
		if got := sameImage(c.a, c.b); got != c.want {
			t.Errorf("sameImage(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

func TestCheckDeploy(t *testing.T) {
	valid := func() agentproto.DeployPayload {
		return agentproto.DeployPayload{AppID: "app_1", AppName: "web", DeploymentID: "dep_1", Image: "nginx:1", ContainerPort: 80}
	}
	p := valid()
	if err := checkDeploy(&p); err != nil {
		t.Fatal(err)
	}
	if p.HealthPath != "/" || p.HealthTimeoutSeconds != 60 {
		t.Errorf("defaults: %+v", p)
	}
	for name, change := range map[string]func(*agentproto.DeployPayload){
		"app id":          func(p *agentproto.DeployPayload) { p.AppID = "a b" },
		"deployment id":   func(p *agentproto.DeployPayload) { p.DeploymentID = "" },
		"no image":        func(p *agentproto.DeployPayload) { p.Image = "" },
		"port":            func(p *agentproto.DeployPayload) { p.ContainerPort = 70000 },
		"health path":     func(p *agentproto.DeployPayload) { p.HealthPath = "health" },
		"absolute url":    func(p *agentproto.DeployPayload) { p.HealthPath = "//evil.example/x" },
		"space in path":   func(p *agentproto.DeployPayload) { p.HealthPath = "/a b" },
		"timeout":         func(p *agentproto.DeployPayload) { p.HealthTimeoutSeconds = -1 },
		"memory":          func(p *agentproto.DeployPayload) { p.MemoryLimitBytes = -1 },
		"env key":         func(p *agentproto.DeployPayload) { p.EnvKeys = []string{"A=B"} },
		"env key twice":   func(p *agentproto.DeployPayload) { p.EnvKeys = []string{"A", "A"} },
		"empty env key":   func(p *agentproto.DeployPayload) { p.EnvKeys = []string{""} },
		"timeout too big": func(p *agentproto.DeployPayload) { p.HealthTimeoutSeconds = 7200 },
	} {
		p := valid()
		change(&p)
		if err := checkDeploy(&p); err == nil {
			t.Errorf("%s: %+v accepted", name, p)
		}
	}
	p = valid()
	p.Image, p.ImageID, p.HealthPath = "", "sha256:abc", "/healthz?full=1"
	if err := checkDeploy(&p); err != nil {
		t.Errorf("rollback payload: %v", err)
	}
}

func TestEnvironment(t *testing.T) {
	env, err := environment([]string{"B", "A", "EMPTY"}, map[string]string{"A": "1", "B": "x=y", "EMPTY": "", "UNLISTED": "z"})
	if err != nil || strings.Join(env, ",") != "B=x=y,A=1,EMPTY=" {
		t.Errorf("environment = %q, %v", env, err)
	}
	if _, err := environment([]string{"A"}, nil); err == nil || !strings.Contains(err.Error(), "A has no value") {
		t.Errorf("missing secret: %v", err)
	}
}

func TestAnswer(t *testing.T) {
	a := answer{Status: 500, Body: excerpt(strings.Repeat("oops\n\t", 100)), At: time.Now()}
	if a.healthy() || !strings.HasPrefix(a.String(), `HTTP 500 Internal Server Error: "oops oops`) || len(a.Body) > maxBodyExcerpt+len("…") {
		t.Errorf("answer %q (%d bytes)", a, len(a.Body))
	}
	for status, want := range map[int]bool{200: true, 204: true, 302: true, 399: true, 199: false, 404: false, 503: false} {
		if got := (answer{Status: status}).healthy(); got != want {
			t.Errorf("status %d healthy = %v", status, got)
		}
	}
	if (answer{Status: 200, Error: "EOF"}).healthy() {
		t.Error("an error is healthy")
	}
	err := &healthError{reason: "no answer", last: answer{Error: "connection refused", At: time.Now()}}
	if err.Error() != "health check failed: no answer; last answer: connection refused" {
		t.Errorf("%q", err)
	}
	if got := excerpt("é" + strings.Repeat("é", 200)); !strings.HasSuffix(got, "é…") {
		t.Errorf("excerpt cut inside a rune: %q", got[len(got)-8:])
	}
}

func TestUpstreamOf(t *testing.T) {
	c := container.Summary{
		State:  container.StateRunning,
		Labels: map[string]string{agentproto.LabelPort: "8080"},
		Ports: []container.PortSummary{
			{PrivatePort: 9090, PublicPort: 40000, Type: "tcp", IP: loopback},
			{PrivatePort: 8080, PublicPort: 40001, Type: "tcp", IP: loopback},
		},
	}
	if got := upstreamOf(c); got != "127.0.0.1:40001" {
		t.Errorf("upstreamOf = %q", got)
	}
	c.State = container.StateExited
	if got := upstreamOf(c); got != "" {
		t.Errorf("upstreamOf(exited) = %q", got)
	}
}

func TestLiveContainer(t *testing.T) {
	items := []container.Summary{
		{ID: "new-exited", State: container.StateExited},
		{ID: "running", State: container.StateRunning},
		{ID: "old-running", State: container.StateRunning},
	}
	if c, ok := liveContainer(items); !ok || c.ID != "running" {
		t.Errorf("live = %v, %v", c.ID, ok)
	}
	if c, ok := liveContainer(items[:1]); !ok || c.ID != "new-exited" {
		t.Errorf("live of stopped ones = %v, %v", c.ID, ok)
	}
	if _, ok := liveContainer(nil); ok {
		t.Error("live of none")
	}
}

// nopSink counts the events emitted to it.
type nopSink struct{ n atomic.Int64 }

func (s *nopSink) Emit(string, string, any) { s.n.Add(1) }

func TestAppLocks(t *testing.T) {
	var l appLocks
	sink := &nopSink{}
	unlock, err := l.lock(context.Background(), "a", sink)
	if err != nil {
		t.Fatal(err)
	}
	// Another application is not held up.
	unlockB, err := l.lock(context.Background(), "b", sink)
	if err != nil {
		t.Fatal(err)
	}
	unlockB()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.lock(ctx, "a", sink); err == nil || sink.n.Load() != 1 {
		t.Errorf("second lock of a: %v, %d events", err, sink.n.Load())
	}
	done := make(chan struct{})
	go func() {
		u, err := l.lock(context.Background(), "a", sink)
		if err == nil {
			u()
		}
		close(done)
	}()
	// The waiting job says so, then gets the lock once it is free.
	testlab.Eventually(t, time.Minute, "the second job to wait for the lock", func() bool { return sink.n.Load() == 2 })
	select {
	case <-done:
		t.Fatal("the second job got the lock while the first held it")
	default:
	}
	unlock()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the waiting job did not get the lock")
	}
}

type upstreamsProxy struct{ got []map[string]string }

func (p *upstreamsProxy) Apply(_ context.Context, _ agentproto.ProxyConfig, ups map[string]string) error {
	p.got = append(p.got, ups)
	return nil
}

// TestSwitchboard: an apply of another job while an application is in
// the middle of a release keeps it on the container the release chose.
func TestSwitchboard(t *testing.T) {
	px := &upstreamsProxy{}
	sw := switchboard{proxy: px, pending: map[string]string{}}
	ctx := context.Background()
	if err := sw.apply(ctx, agentproto.ProxyConfig{}, nil); err != nil || px.got[0] != nil {
		t.Fatalf("nothing pinned: %v, %v", px.got, err)
	}
	sw.hold("a", "127.0.0.1:1000") // a's release starts; its old container serves
	_ = sw.apply(ctx, agentproto.ProxyConfig{}, map[string]string{"b": "127.0.0.1:2000"})
	_ = sw.apply(ctx, agentproto.ProxyConfig{}, map[string]string{"a": "127.0.0.1:1001"}) // a's switch
	_ = sw.apply(ctx, agentproto.ProxyConfig{}, nil)
	sw.release("a")
	sw.release("b")
	_ = sw.apply(ctx, agentproto.ProxyConfig{}, nil)
	want := []string{"", "a=127.0.0.1:1000 b=127.0.0.1:2000", "a=127.0.0.1:1001 b=127.0.0.1:2000", "a=127.0.0.1:1001 b=127.0.0.1:2000", ""}
	for i, ups := range px.got {
		var parts []string
		for _, k := range []string{"a", "b"} {
			if v, ok := ups[k]; ok {
				parts = append(parts, k+"="+v)
			}
		}
		if got := strings.Join(parts, " "); got != want[i] {
			t.Errorf("apply %d upstreams %q, want %q", i, got, want[i])
		}
	}
}

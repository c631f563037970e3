package deploy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// TestReadBuildKit reads the output of real BuildKit builds (Docker
// Engine 20.10, recorded in testdata) of a Dockerfile with three steps:
// a cold build, the same again from the cache, and one whose last step
// fails. Each step is an event, and so is each line of its output; the
// steps and those from the cache are counted.
func TestReadBuildKit(t *testing.T) {
	const image = "sha256:902587f504203930d7d7b9ac86ad6b49329bb4c50b86a068700c203c39b3f0bb"
	for _, tc := range []struct {
		file          string
		id, err       string
		steps, cached int
		events        []string
	}{
		{file: "cold", id: image, steps: 3, events: []string{"info: [internal] load remote build context", "info: [1/3] COPY run /run-id",
			`info: [3/3] RUN --mount=type=secret,id=NPM_TOKEN ["/web", "digest", "/run/secrets/NPM_TOKEN", "/secret.sha256"]`,
			"info: digest written", "info: exporting to image", "info: Successfully tagged capstan-capture:1"}},
		{file: "cached", id: image, steps: 3, cached: 3, events: []string{"info: CACHED [1/3] COPY run /run-id",
			"info: CACHED [3/3] RUN --mount=type=secret,id=NPM_TOKEN"}},
		{file: "failed", err: "executor failed running [/web digest /nonexistent /x]: exit code: 1", steps: 4, cached: 3,
			events: []string{"info: open /nonexistent: no such file or directory",
				`error: ERROR [4/4] RUN ["/web", "digest", "/nonexistent", "/x"]: executor failed running`,
				"error: executor failed running"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open("testdata/buildkit-" + tc.file + ".jsonl")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			res := &agentproto.BuildResult{}
			rec := &recorder{}
			id, err := readBuildKit(f, res, rec)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || err.Error() != tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
			if id != tc.id || res.Steps != tc.steps || res.CachedSteps != tc.cached {
				t.Errorf("image %q, %d steps, %d cached; want %q, %d, %d", id, res.Steps, res.CachedSteps, tc.id, tc.steps, tc.cached)
			}
			for _, e := range tc.events {
				if !rec.has(e) {
					t.Errorf("no event %q in:\n%s", e, strings.Join(rec.events, "\n"))
				}
			}
		})
	}
}

// TestReadBuildKitRefusesLegacyBuilds: an engine that answers a BuildKit
// build with its legacy builder would build without the secrets.
func TestReadBuildKitRefusesLegacyBuilds(t *testing.T) {
	out := `{"stream":"Step 1/3 : FROM scratch\n"}` + "\n" + `{"stream":"\n"}` + "\n"
	_, err := readBuildKit(strings.NewReader(out), &agentproto.BuildResult{}, &recorder{})
	if err == nil || !strings.Contains(err.Error(), errNoBuildKit) || !strings.Contains(err.Error(), "legacy builder") {
		t.Fatalf("error %v, want %q and the legacy builder named", err, errNoBuildKit)
	}
}

// TestBuildKitUnavailable: an engine without BuildKit's session endpoint
// (it answers POST /session 404, as engines before BuildKit and other
// implementations of the Engine API do) fails a build with secrets
// saying that build secrets need BuildKit, and is never asked to build.
// No engine of this machine lacks BuildKit: this one speaks the Engine
// API's answers over a real socket.
func TestBuildKitUnavailable(t *testing.T) {
	var built atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
		switch {
		case strings.HasSuffix(r.URL.Path, "/_ping"):
			w.Write([]byte("OK"))
		case strings.HasSuffix(r.URL.Path, "/build"):
			built.Store(true)
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"message":"page not found"}`))
		}
	}))
	t.Cleanup(srv.Close)
	cli, err := client.New(client.WithHost("tcp://" + srv.Listener.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	_, err = buildKit(context.Background(), cli, strings.NewReader(""), client.ImageBuildOptions{Tags: []string{"capstan/x:1"}},
		map[string][]byte{"NPM_TOKEN": []byte("s3cret")}, &agentproto.BuildResult{}, &recorder{})
	if err == nil || !strings.Contains(err.Error(), errNoBuildKit) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("error %v, want %q with the engine's answer", err, errNoBuildKit)
	}
	if built.Load() {
		t.Error("the engine was asked to build")
	}
}

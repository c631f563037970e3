package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/buildkit"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// A build with build secrets goes through the engine's BuildKit builder:
// the agent opens a BuildKit session that serves the secrets, then posts
// the build (version 2, the session's id) with the context as the
// request's body. The values reach only the steps that mount them
// (RUN --mount=type=secret,id=ID, at /run/secrets/ID by default): they
// are in no build argument, no layer and not in the image's history.

// errNoBuildKit explains a refusal of the engine to build with BuildKit.
const errNoBuildKit = "build secrets need the Docker engine's BuildKit builder"

// stepName is the name of a Dockerfile step's vertex: "[2/3] RUN make",
// "[build 1/4] COPY . ." in a multi-stage build.
var stepName = regexp.MustCompile(`^\[(?:[^\]]+ )?\d+/\d+\] `)

// buildKit builds with BuildKit, serving secrets to the build through a
// session, and returns the id of the image built. opts is the legacy
// build's; its builder and session are set here.
func buildKit(ctx context.Context, cli *client.Client, body io.Reader, opts client.ImageBuildOptions, secrets map[string][]byte,
	res *agentproto.BuildResult, events agent.EventSink) (string, error) {
	dial := func(ctx context.Context, proto string, meta map[string][]string) (net.Conn, error) {
		return cli.DialHijack(ctx, "/session", proto, meta)
	}
	s, err := buildkit.OpenSession(ctx, dial, "capstan-agent", secrets)
	if err != nil {
		return "", fmt.Errorf("%s; opening a BuildKit session with the engine failed: %w", errNoBuildKit, err)
	}
	defer s.Close()
	opts.Version, opts.SessionID = build.BuilderBuildKit, s.ID()
	out, err := cli.ImageBuild(ctx, body, opts)
	if err != nil {
		return "", fmt.Errorf("%s; the engine refused a BuildKit build: %w", errNoBuildKit, err)
	}
	defer out.Body.Close()
	return readBuildKit(out.Body, res, events)
}

// traceReader follows a BuildKit build's progress: each step is an
// event when it starts (or is found in the cache) and when it fails,
// each line of its output an event of its own.
type traceReader struct {
	res    *agentproto.BuildResult
	events agent.EventSink
	// seen are the vertexes reported, by digest; cached those reported
	// from the cache, failed those reported failing.
	seen, cached, failed map[string]bool
	// partial holds each vertex's output after its last newline.
	partial map[string]string
}

// readBuildKit reads a BuildKit build's output and returns the id of
// the image built. Output of the legacy builder (an engine that ignored
// the request for BuildKit) fails the build: it would run without the
// secrets.
func readBuildKit(r io.Reader, res *agentproto.BuildResult, events agent.EventSink) (string, error) {
	t := &traceReader{res: res, events: events, seen: map[string]bool{}, cached: map[string]bool{},
		failed: map[string]bool{}, partial: map[string]string{}}
	dec := json.NewDecoder(bufio.NewReader(r))
	var id string
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			t.flush()
			return id, nil
		} else if err != nil {
			return "", fmt.Errorf("reading the build output: %w", err)
		}
		if m.Error != nil {
			t.flush()
			events.Emit(agentproto.LevelError, trimLine(m.Error.Message), nil)
			return "", errors.New(m.Error.Message)
		}
		switch {
		case m.ID == buildkit.TraceID && m.Aux != nil:
			var raw []byte
			if err := json.Unmarshal(*m.Aux, &raw); err != nil {
				return "", fmt.Errorf("reading the build output: a trace message is not base64: %w", err)
			}
			st, err := buildkit.DecodeStatus(raw)
			if err != nil {
				return "", fmt.Errorf("reading the build output: %w", err)
			}
			t.status(st)
		case m.ID == buildkit.ImageID && m.Aux != nil:
			var aux struct {
				ID string `json:"ID"`
			}
			if json.Unmarshal(*m.Aux, &aux) == nil && aux.ID != "" {
				id = aux.ID
			}
		case strings.HasPrefix(m.Stream, "Step "):
			return "", fmt.Errorf("%s, and the engine built with its legacy builder instead", errNoBuildKit)
		default:
			for _, line := range strings.Split(m.Stream, "\n") {
				if line = strings.TrimRight(line, "\r "); line != "" {
					events.Emit(agentproto.LevelInfo, trimLine(line), nil)
				}
			}
		}
	}
}

// status reports a trace message.
func (t *traceReader) status(st buildkit.Status) {
	for _, v := range st.Vertexes {
		step := stepName.MatchString(v.Name)
		if !t.seen[v.Digest] && (v.Started || v.Cached) {
			t.seen[v.Digest] = true
			if step {
				t.res.Steps++
			}
			if !v.Cached {
				t.events.Emit(agentproto.LevelInfo, trimLine(v.Name), nil)
			}
		}
		if v.Cached && !t.cached[v.Digest] {
			t.cached[v.Digest] = true
			if step {
				t.res.CachedSteps++
			}
			t.events.Emit(agentproto.LevelInfo, trimLine("CACHED "+v.Name), nil)
		}
		if v.Error != "" && !t.failed[v.Digest] {
			t.failed[v.Digest] = true
			t.flushVertex(v.Digest)
			t.events.Emit(agentproto.LevelError, trimLine("ERROR "+v.Name+": "+v.Error), nil)
		}
	}
	for _, l := range st.Logs {
		text := t.partial[l.Vertex] + string(l.Msg)
		lines := strings.Split(text, "\n")
		t.partial[l.Vertex] = lines[len(lines)-1]
		for _, line := range lines[:len(lines)-1] {
			t.line(line)
		}
	}
}

// line reports a line of a step's output.
func (t *traceReader) line(s string) {
	if s = strings.TrimRight(s, "\r "); s != "" {
		t.events.Emit(agentproto.LevelInfo, trimLine(s), map[string]string{"build": "output"})
	}
}

// flushVertex reports the output of a vertex not yet ended by a newline.
func (t *traceReader) flushVertex(digest string) {
	t.line(t.partial[digest])
	delete(t.partial, digest)
}

// flush reports every vertex's output not yet ended by a newline.
func (t *traceReader) flush() {
	for _, d := range slices.Sorted(maps.Keys(t.partial)) {
		t.flushVertex(d)
	}
}

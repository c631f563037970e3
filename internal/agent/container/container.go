// Package container runs the container.* jobs and the container reads of
// logs.read through the Docker Engine API (github.com/moby/moby/client) on
// the local engine: unix:///var/run/docker.sock, or DOCKER_HOST. The client
// negotiates the API version down to the engine's (API 1.40 and later).
package container

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// containerPattern is a container name or id as the control plane accepts
// it; checked again here, before any name reaches the engine.
var containerPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)

// ValidContainer reports whether name is a Docker container name or id.
func ValidContainer(name string) bool { return containerPattern.MatchString(name) }

func checkContainer(name string) error {
	if !ValidContainer(name) {
		return fmt.Errorf("invalid container name %q: must be a Docker container name or id", name)
	}
	return nil
}

// Docker runs container jobs against one Docker engine. Its zero value
// uses the local engine; it is safe for concurrent jobs.
type Docker struct {
	// Host is the engine's address (e.g. unix:///var/run/docker.sock);
	// empty means DOCKER_HOST, or the default socket.
	Host string

	docker dockerc.Lazy
}

// client returns the engine's API client, made on first use. Making it
// does not connect; the API version is negotiated on the first request.
func (d *Docker) client() (*client.Client, error) {
	return d.docker.Client(d.Host)
}

// Close releases the client's connections; jobs after it fail.
func (d *Docker) Close() error {
	return d.docker.Close()
}

// Register adds the container.* job types to r. On container.stop the
// engine sends the container's stop signal and kills it after its stop
// timeout (10 s by default).
func (d *Docker) Register(r agent.Registry) {
	agent.Handle(r, agentproto.ContainerStart, d.action("start"))
	agent.Handle(r, agentproto.ContainerStop, d.action("stop"))
	agent.Handle(r, agentproto.ContainerRestart, d.action("restart"))
	agent.Handle(r, agentproto.ContainerLogs, d.logs)
	agent.Handle(r, agentproto.ContainerInspect, d.runInspect)
}

// engineError words an engine error for a job's result.
func engineError(name, doing string, err error) error {
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("no such container: %s", name)
	}
	return fmt.Errorf("%s %s: %w", doing, name, err)
}

// target checks the container a job names, and returns the engine's
// client.
func (d *Docker) target(p agentproto.ContainerPayload) (*client.Client, error) {
	if err := checkContainer(p.Container); err != nil {
		return nil, err
	}
	return d.client()
}

// action returns the handler of container.<verb>: it inspects the
// container, acts on it, and returns its state afterwards
// (agentproto.ContainerState).
func (d *Docker) action(verb string) func(context.Context, agent.Call[agentproto.ContainerPayload]) (agentproto.ContainerState, error) {
	return func(ctx context.Context, c agent.Call[agentproto.ContainerPayload]) (agentproto.ContainerState, error) {
		p, events := c.Payload, c.Events
		cli, err := d.target(p)
		if err != nil {
			return agentproto.ContainerState{}, err
		}
		before, err := state(ctx, cli, p.Container)
		if err != nil {
			return agentproto.ContainerState{}, err
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("container %s (%s) is %s; %s it", before.Container, shortID(before.ID), before.State, verbing(verb)), before)
		// Act on the id inspected, not on a name that may change hands.
		switch verb {
		case "start":
			_, err = cli.ContainerStart(ctx, before.ID, client.ContainerStartOptions{})
		case "stop":
			_, err = cli.ContainerStop(ctx, before.ID, client.ContainerStopOptions{})
		case "restart":
			_, err = cli.ContainerRestart(ctx, before.ID, client.ContainerRestartOptions{})
		}
		if err != nil {
			return agentproto.ContainerState{}, engineError(p.Container, verbing(verb), err)
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("the engine %s container %s", pastTense(verb), before.Container), nil)
		after, err := state(ctx, cli, before.ID)
		if err != nil {
			return agentproto.ContainerState{}, err
		}
		after.Container = before.Container
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("container %s is %s (%s)", after.Container, after.State, after.Status), after)
		return after, nil
	}
}

func verbing(verb string) string {
	switch verb {
	case "stop":
		return "stopping"
	case "start":
		return "starting"
	}
	return "restarting"
}

func pastTense(verb string) string {
	switch verb {
	case "stop":
		return "stopped"
	case "start":
		return "started"
	}
	return "restarted"
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// inspect returns a container's details; a missing one is "no such
// container".
func inspect(ctx context.Context, cli *client.Client, name string) (container.InspectResponse, error) {
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return container.InspectResponse{}, engineError(name, "inspecting container", err)
	}
	if res.Container.State == nil {
		return container.InspectResponse{}, fmt.Errorf("inspecting container %s: the engine sent no state", name)
	}
	return res.Container, nil
}

// state inspects a container. Status is the engine's human summary, as in
// docker ps ("Up 3 seconds", "Exited (0) 2 seconds ago").
func state(ctx context.Context, cli *client.Client, name string) (agentproto.ContainerState, error) {
	c, err := inspect(ctx, cli, name)
	if err != nil {
		return agentproto.ContainerState{}, err
	}
	st := agentproto.ContainerState{
		Container:    strings.TrimPrefix(c.Name, "/"),
		ID:           c.ID,
		State:        string(c.State.Status),
		Status:       string(c.State.Status),
		RestartCount: c.RestartCount,
	}
	if t, err := time.Parse(time.RFC3339Nano, c.State.StartedAt); err == nil && t.Year() > 1 {
		st.StartedAt = t.UTC()
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("id", c.ID)})
	if err == nil {
		for _, s := range list.Items {
			if s.ID == c.ID && s.Status != "" {
				st.Status = s.Status
			}
		}
	}
	return st, nil
}

// runInspect runs container.inspect: the engine's inspect document,
// with every environment value hidden (they hold the applications'
// secrets).
func (d *Docker) runInspect(ctx context.Context, c agent.Call[agentproto.ContainerPayload]) (agentproto.ContainerInspectResult, error) {
	p := c.Payload
	cli, err := d.target(p)
	if err != nil {
		return agentproto.ContainerInspectResult{}, err
	}
	res, err := cli.ContainerInspect(ctx, p.Container, client.ContainerInspectOptions{})
	if err != nil {
		return agentproto.ContainerInspectResult{}, engineError(p.Container, "inspecting container", err)
	}
	doc, err := hideEnv(res.Raw)
	if err != nil {
		return agentproto.ContainerInspectResult{}, fmt.Errorf("inspecting container %s: %w", p.Container, err)
	}
	name := strings.TrimPrefix(res.Container.Name, "/")
	c.Events.Emit(agentproto.LevelInfo, fmt.Sprintf("inspected container %s (%s)", name, shortID(res.Container.ID)), nil)
	return agentproto.ContainerInspectResult{Container: name, ID: res.Container.ID, Inspect: doc}, nil
}

// hideEnv decodes an inspect document and replaces the value of every
// Config.Env entry with agentproto.HiddenEnvValue.
func hideEnv(raw []byte) (map[string]any, error) {
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("the engine's answer: %w", err)
	}
	cfg, _ := doc["Config"].(map[string]any)
	if cfg == nil {
		return doc, nil
	}
	env, _ := cfg["Env"].([]any)
	for i, e := range env {
		s, _ := e.(string)
		key, _, _ := strings.Cut(s, "=")
		env[i] = key + "=" + agentproto.HiddenEnvValue
	}
	return doc, nil
}

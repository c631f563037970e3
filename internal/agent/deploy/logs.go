package deploy

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/logs"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

func (d *Deployer) runLogs(ctx context.Context, call agent.Call[agentproto.AppLogsPayload]) (agentproto.AppLogsResult, error) {
	p, events := call.Payload, call.Events
	if err := checkAppID(p.AppID); err != nil {
		return agentproto.AppLogsResult{}, fmt.Errorf("invalid app.logs payload: %w", err)
	}
	n, err := logs.ReadLines(p.Lines)
	if err != nil {
		return agentproto.AppLogsResult{}, fmt.Errorf("invalid app.logs payload: %w", err)
	}
	if live, ok := d.serviceApp(p.AppID); ok {
		return d.serviceLogs(ctx, live, p, n, events)
	}
	cli, err := d.client()
	if err != nil {
		return agentproto.AppLogsResult{}, err
	}
	list, err := appContainers(ctx, cli, p.AppID)
	if err != nil {
		return agentproto.AppLogsResult{}, err
	}
	if p.Service != "" {
		// A compose application's service: its web service's containers
		// are the application's, the others' carry LabelComposeApp.
		others, err := serviceContainers(ctx, cli, p.AppID)
		if err != nil {
			return agentproto.AppLogsResult{}, err
		}
		list = serviceContainersOf(append(list, others...), p.Service)
		slices.SortStableFunc(list, func(a, b containerSummary) int { return cmp.Compare(b.Created, a.Created) })
	}
	live, ok := liveContainer(list)
	if !ok && p.Service != "" {
		return agentproto.AppLogsResult{}, fmt.Errorf("service %s of application %s has no container on this server", p.Service, p.AppID)
	}
	if !ok {
		return agentproto.AppLogsResult{}, fmt.Errorf("application %s has no container on this server", p.AppID)
	}
	insp, err := cli.ContainerInspect(ctx, live.ID, client.ContainerInspectOptions{})
	if err != nil {
		return agentproto.AppLogsResult{}, fmt.Errorf("inspecting container %s: %w", containerName(live), err)
	}
	c := insp.Container
	res := agentproto.AppLogsResult{ContainerID: c.ID, RestartCount: c.RestartCount, State: string(live.State)}
	if c.State != nil {
		res.State = string(c.State.Status)
		if t, err := time.Parse(time.RFC3339Nano, c.State.StartedAt); err == nil && t.Year() > 1 {
			res.StartedAt = t.UTC()
		}
	}
	tty := c.Config != nil && c.Config.Tty
	what := fmt.Sprintf("the last %d lines", n)
	if p.Since != nil {
		what += " since " + p.Since.UTC().Format(time.RFC3339)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("reading %s of the log of container %s (%s, deployment %s)",
		what, containerName(live), res.State, live.Labels[agentproto.LabelDeployment]), nil)
	opts := client.ContainerLogsOptions{Tail: strconv.Itoa(n)}
	if p.Since != nil {
		opts.Since = fmt.Sprintf("%d.%09d", p.Since.Unix(), p.Since.Nanosecond())
	}
	lines, err := readLog(ctx, cli, c.ID, tty, opts)
	if err != nil {
		return agentproto.AppLogsResult{}, fmt.Errorf("reading the log of container %s: %w", containerName(live), err)
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	kept := logs.Fit(lines, true)
	logs.SortByTime(kept)
	msg := fmt.Sprintf("read %d lines", len(kept))
	if len(kept) < len(lines) {
		msg += fmt.Sprintf(" (%d older ones did not fit in one result)", len(lines)-len(kept))
	}
	events.Emit(agentproto.LevelInfo, msg, nil)
	res.Lines = kept
	if res.Lines == nil {
		res.Lines = []agentproto.LogLine{}
	}
	return res, nil
}

// logTail emits the last lines of a failed release's container, for the
// job's events.
func logTail(ctx context.Context, cli *client.Client, s started, events agent.EventSink) {
	ctx, cancel := cleanupContext(ctx, 10*time.Second)
	defer cancel()
	lines, err := readLog(ctx, cli, s.ID, false, client.ContainerLogsOptions{Tail: "20"})
	if err != nil || len(lines) == 0 {
		return
	}
	msgs := make([]string, len(lines))
	for i, l := range lines {
		msgs[i] = l.Stream + ": " + l.Message
	}
	events.Emit(agentproto.LevelWarn, fmt.Sprintf("the last %d lines of the log of container %s", len(lines), s.Name),
		map[string]any{"lines": msgs})
}

// readLog reads a container's log with the engine's timestamps, in the
// engine's order.
func readLog(ctx context.Context, cli *client.Client, id string, tty bool, opts client.ContainerLogsOptions) ([]agentproto.LogLine, error) {
	opts.ShowStdout, opts.ShowStderr, opts.Timestamps = true, true, true
	rc, err := cli.ContainerLogs(ctx, id, opts)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var lines []agentproto.LogLine
	err = logs.ReadDocker(rc, tty, func(l agentproto.LogLine) bool { lines = append(lines, l); return true })
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return lines, err
}

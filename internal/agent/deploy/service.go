package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/service"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// A service application is built on the server from one commit and run
// by systemd instead of Docker. A release: fetch the commit into the
// agent's state directory; have the helper (svchelper.go) move it into
// AppsDir/<name>/releases/<deployment id> and run the build command there
// as the build account; have it write the unit of a new slot,
// capstan-app-<name>@<port>.service, on a free loopback port; start the
// unit; wait for its health path; switch the proxy; then have the helper
// stop and remove the old slots and the releases no longer kept. The slot
// the proxy sends the application to is recorded in the agent's state
// directory (live.json), where the proxy finds it (LiveServiceUpstreams).

// Journal reads a unit's journal; *service.Systemd satisfies it.
type Journal interface {
	ReadLogs(ctx context.Context, p agentproto.LogsReadPayload, events agent.EventSink) (agentproto.LogsResult, error)
}

// liveSlot is the content of live.json: the slot serving an application.
type liveSlot struct {
	AppID   string `json:"app_id"`
	Name    string `json:"name"`
	Port    int    `json:"port"`
	Release string `json:"release"`
}

func (l liveSlot) upstream() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port)) }

// svcDir is the agent's directory of service application name.
func (d *Deployer) svcDir(name string) string { return filepath.Join(d.opts.StateDir, "apps", name) }

func (d *Deployer) appsDir() string {
	if d.opts.AppsDir != "" {
		return d.opts.AppsDir
	}
	return AppsDir
}

func (d *Deployer) unitDir() string {
	if d.opts.UnitDir != "" {
		return d.opts.UnitDir
	}
	return UnitDir
}

func (d *Deployer) systemd(ctx context.Context) (*sddbus.Conn, error) {
	return service.Dial(ctx, d.opts.Systemd)
}

// checkService checks the payload of a service application's release.
func checkService(p *agentproto.DeployPayload) error {
	if err := checkAppID(p.AppID); err != nil {
		return err
	}
	s := p.Service
	if !svcNamePattern.MatchString(p.AppName) {
		return fmt.Errorf("app_name %q is not a valid application name", p.AppName)
	}
	if !releasePattern.MatchString(p.DeploymentID) {
		return fmt.Errorf("deployment_id %q is not valid", p.DeploymentID)
	}
	if s.StartCommand == "" || !oneLine(s.StartCommand) {
		return errors.New("service.start_command must be one line of at most 4096 characters")
	}
	if !oneLine(s.BuildCommand) {
		return errors.New("service.build_command must be one line of at most 4096 characters")
	}
	if t := time.Duration(s.BuildTimeoutSeconds) * time.Second; s.BuildTimeoutSeconds < 0 || t > MaxBuildTimeout {
		return fmt.Errorf("service.build_timeout_seconds must be between 1 and %d", int(MaxBuildTimeout/time.Second))
	}
	for _, r := range append(slices.Clone(s.KeepReleases), s.Release) {
		if r != "" && !releasePattern.MatchString(r) {
			return fmt.Errorf("release %q is not a valid deployment id", r)
		}
	}
	if s.Release == "" && p.Build == nil {
		return errors.New("build (the commit to fetch) is required unless service.release names a kept release")
	}
	if s.Release == "" {
		b := p.Build
		if !commitPattern.MatchString(b.Commit) {
			return fmt.Errorf("build.commit must be 40 lowercase hexadecimal digits, not %q", b.Commit)
		}
	}
	// The container checks that apply: health path and timeout, memory,
	// environment names.
	q := *p
	q.Image, q.ContainerPort = "service", 1
	if err := checkDeploy(&q); err != nil {
		return err
	}
	p.HealthPath, p.HealthTimeoutSeconds = q.HealthPath, q.HealthTimeoutSeconds
	for _, k := range p.EnvKeys {
		if !envKeyPattern.MatchString(k) || k == "PORT" {
			return fmt.Errorf("environment variable %q cannot be set for a service application", k)
		}
	}
	return nil
}

func (d *Deployer) runServiceDeploy(ctx context.Context, p agentproto.DeployPayload, secrets map[string]string, events agent.EventSink) (agentproto.DeployResult, error) {
	if d.opts.StateDir == "" {
		return agentproto.DeployResult{}, errors.New("this agent has no state directory for service applications")
	}
	if err := checkService(&p); err != nil {
		return agentproto.DeployResult{}, fmt.Errorf("invalid app.deploy payload: %w", err)
	}
	env, err := environment(p.EnvKeys, secrets)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	token := ""
	if p.Service.Release == "" {
		if token = secrets[agentproto.SecretGitToken]; token == "" {
			return agentproto.DeployResult{}, fmt.Errorf("the job's secrets have no %s to fetch the repository with", agentproto.SecretGitToken)
		}
		if _, err := checkBuild(agentproto.DeployPayload{Build: p.Build, Image: "service"}, secrets); err != nil {
			return agentproto.DeployResult{}, fmt.Errorf("invalid app.deploy payload: %w", err)
		}
	}
	unlock, err := d.locks.lock(ctx, p.AppID, events)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	defer unlock()
	conn, err := d.systemd(ctx)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	defer conn.Close()
	res, err := d.releaseService(ctx, conn, p, env, token, events)
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	return res, nil
}

func (d *Deployer) releaseService(ctx context.Context, conn *sddbus.Conn, p agentproto.DeployPayload, env []string, token string, events agent.EventSink) (agentproto.DeployResult, error) {
	s := p.Service
	name := p.AppName
	dir := d.svcDir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return agentproto.DeployResult{}, err
	}
	rel := &agentproto.ServiceRelease{Release: p.DeploymentID, Retired: []string{}, Pruned: []string{}}

	// 1. The release: built from the commit, or a kept one.
	if s.Release != "" {
		rel.Release = s.Release
		if fi, err := os.Stat(filepath.Join(d.appsDir(), name, "releases", s.Release)); err != nil || !fi.IsDir() {
			return agentproto.DeployResult{}, fmt.Errorf("the release of deployment %s is no longer kept on this server", s.Release)
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("starting the kept release of deployment %s again", s.Release), nil)
	} else if _, err := os.Stat(filepath.Join(d.appsDir(), name, "releases", p.DeploymentID)); err == nil {
		// The same deployment again (a job claimed twice): built already.
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("the release of deployment %s is built already", p.DeploymentID), nil)
	} else {
		ms, err := d.buildRelease(ctx, conn, p, token, events)
		if err != nil {
			return agentproto.DeployResult{}, err
		}
		rel.Built, rel.BuildMillis = true, ms
	}
	rel.Dir = filepath.Join(d.appsDir(), name, "releases", rel.Release)

	// The live slot keeps the proxy until the switch.
	defer d.sw.release(p.AppID)
	old, hasOld := d.liveSlot(name)
	if hasOld {
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("the application's live slot is %s (release %s)", SlotUnit(name, old.Port), old.Release), nil)
		d.sw.hold(p.AppID, old.upstream())
	} else {
		events.Emit(agentproto.LevelInfo, "the application has no slot on this server yet", nil)
	}

	// 2. The new slot.
	port, err := agent.FreeLoopbackPort()
	if err != nil {
		return agentproto.DeployResult{}, err
	}
	unit := SlotUnit(name, port)
	rel.Unit, rel.Port = unit, port
	vars := make([]envVar, len(env))
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[i] = envVar{Key: k, Value: v}
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("writing %s for release %s on 127.0.0.1:%d", unit, rel.Release, port), nil)
	if _, err := d.helper(ctx, conn, helperRequest{Op: opInstall, Name: name, Release: rel.Release, Port: port,
		StartCommand: s.StartCommand, MemoryMax: p.MemoryLimitBytes, Env: vars,
		Description: fmt.Sprintf("Capstan application %s (deployment %s)", name, rel.Release)}, events); err != nil {
		return agentproto.DeployResult{}, fmt.Errorf("writing the unit %s: %w", unit, err)
	}
	events.Emit(agentproto.LevelInfo, "starting "+unit, nil)
	if err := startUnit(ctx, conn, unit); err != nil {
		d.journalTail(ctx, unit, events)
		d.retireSlot(ctx, conn, name, port, events)
		return agentproto.DeployResult{}, err
	}

	// 3. Its health.
	healthy, err := d.waitUnitHealthy(ctx, conn, unit, port, p.HealthPath, time.Duration(p.HealthTimeoutSeconds)*time.Second, events)
	if err != nil {
		events.Emit(agentproto.LevelError, err.Error(), healthy)
		d.journalTail(ctx, unit, events)
		d.retireSlot(ctx, conn, name, port, events)
		return agentproto.DeployResult{}, err
	}

	// 4. The switch.
	live := liveSlot{AppID: p.AppID, Name: name, Port: port, Release: rel.Release}
	if _, err := d.switchProxy(ctx, p, started{Name: unit, HostPort: port}, events); err != nil {
		d.retireSlot(ctx, conn, name, port, events)
		d.restoreProxy(ctx, p, events)
		return agentproto.DeployResult{}, err
	}
	if err := d.setLive(live); err != nil {
		return agentproto.DeployResult{}, fmt.Errorf("recording the live slot: %w", err)
	}

	// 5. The old slots, after the drain.
	slots, err := listSlots(d.unitDir(), name)
	if err != nil {
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("not stopping the old slots: %v", err), nil)
	}
	var others []slot
	for _, sl := range slots {
		if sl.Port != port {
			others = append(others, sl)
		}
	}
	if len(others) > 0 && hasOld && d.opts.Proxy != nil && d.opts.Drain > 0 {
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("waiting %s for the requests sent to the old slot before the switch", d.opts.Drain), nil)
		t := time.NewTimer(d.opts.Drain)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	for _, sl := range others {
		if d.retireSlot(ctx, conn, name, sl.Port, events) {
			rel.Retired = append(rel.Retired, sl.Unit)
		}
	}

	// 6. The releases no longer kept.
	if s.KeepReleases != nil {
		keep := append(slices.Clone(s.KeepReleases), rel.Release, p.DeploymentID)
		hr, err := d.helper(ctx, conn, helperRequest{Op: opPrune, Name: name, Keep: keep}, events)
		if err != nil {
			events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not remove the releases no longer kept: %v", err), nil)
		} else if len(hr.Pruned) > 0 {
			rel.Pruned = hr.Pruned
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("removed the releases no longer kept: %s", strings.Join(hr.Pruned, ", ")), nil)
		}
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("released deployment %s: %s serves release %s on 127.0.0.1:%d", p.DeploymentID, unit, rel.Release, port), nil)
	return agentproto.DeployResult{
		HostPort:        port,
		RemovedIDs:      []string{},
		PrunedImageIDs:  []string{},
		HealthStatus:    healthy.Status,
		HealthCheckedAt: healthy.At.Format(time.RFC3339Nano),
		Service:         rel,
	}, nil
}

// buildRelease fetches the commit and has the helper build the release
// from it, streaming the build's output as events; it returns how long
// the build command ran.
func (d *Deployer) buildRelease(ctx context.Context, conn *sddbus.Conn, p agentproto.DeployPayload, token string, events agent.EventSink) (int64, error) {
	b := p.Build
	dir := d.svcDir(p.AppName)
	checkout := "checkout-" + p.DeploymentID
	src := filepath.Join(dir, checkout)
	os.RemoveAll(src)
	home, err := os.MkdirTemp(dir, "git-home-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(home)
	defer os.RemoveAll(src)
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("fetching commit %s of %s", b.Commit[:12], b.Repository), nil)
	start := time.Now()
	if err := fetchCommit(ctx, home, src, b.CloneURL, b.Commit, token); err != nil {
		return 0, err
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("fetched commit %s in %d ms", b.Commit[:12], time.Since(start).Milliseconds()), nil)
	// The checkout is read by root and then by the build account only.
	if err := os.Chmod(src, 0o755); err != nil {
		return 0, err
	}
	logPath := filepath.Join(dir, helperBuildLog)
	if err := os.WriteFile(logPath, nil, 0o600); err != nil {
		return 0, err
	}
	if s := p.Service.BuildCommand; s != "" {
		events.Emit(agentproto.LevelInfo, "building: "+s, nil)
	}
	stop := make(chan struct{})
	tailed := make(chan []string, 1)
	go func() { tailed <- tailLog(logPath, stop, d.opts.HealthInterval, events) }()
	hr, err := d.helper(ctx, conn, helperRequest{Op: opBuild, Name: p.AppName, Release: p.DeploymentID, Checkout: checkout,
		BuildCommand: p.Service.BuildCommand, BuildTimeoutSeconds: p.Service.BuildTimeoutSeconds}, events)
	close(stop)
	tail := <-tailed
	if err != nil {
		if len(tail) > 0 {
			events.Emit(agentproto.LevelError, fmt.Sprintf("the last %d lines of the build output", len(tail)), map[string]any{"lines": tail})
		}
		return 0, fmt.Errorf("building release %s: %w; output tail:\n%s", p.DeploymentID, err, strings.Join(tail, "\n"))
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("built release %s in %d ms", p.DeploymentID, hr.BuildMillis), nil)
	return hr.BuildMillis, nil
}

// maxTail is the number of build output lines a failed build reports.
const maxTail = 30

// tailLog emits the lines appended to path as events until stop is
// closed (and the rest after it); it returns the last maxTail lines.
func tailLog(path string, stop <-chan struct{}, every time.Duration, events agent.EventSink) []string {
	var tail []string
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	br := bufio.NewReader(f)
	partial := ""
	drain := func() {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				partial += line
				return
			}
			line = strings.TrimRight(partial+line, "\r\n")
			partial = ""
			events.Emit(agentproto.LevelInfo, trimLine(line), map[string]string{"build": "output"})
			tail = append(tail, trimLine(line))
			if len(tail) > maxTail {
				tail = tail[1:]
			}
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		drain()
		select {
		case <-t.C:
		case <-stop:
			drain()
			if partial != "" {
				events.Emit(agentproto.LevelInfo, trimLine(partial), map[string]string{"build": "output"})
				tail = append(tail, trimLine(partial))
			}
			if len(tail) > maxTail {
				tail = tail[len(tail)-maxTail:]
			}
			return tail
		}
	}
}

// helper has the root helper carry out req and returns its result.
func (d *Deployer) helper(ctx context.Context, conn *sddbus.Conn, req helperRequest, events agent.EventSink) (helperResult, error) {
	dir := d.svcDir(req.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return helperResult{}, err
	}
	os.Remove(filepath.Join(dir, helperResultFile))
	b, err := json.Marshal(req)
	if err != nil {
		return helperResult{}, err
	}
	if err := writeAtomic(dir, helperRequestFile, b, 0o600, nil); err != nil {
		return helperResult{}, err
	}
	// The request may hold environment values: never left behind.
	defer os.Remove(filepath.Join(dir, helperRequestFile))
	unit := HelperUnitPrefix + req.Name + ".service"
	startErr := startUnit(ctx, conn, unit)
	if ctx.Err() != nil {
		// The helper (and a build it runs) stops with the job.
		cctx, cancel := cleanupContext(ctx, 30*time.Second)
		defer cancel()
		stopUnit(cctx, conn, unit) //nolint:errcheck // best effort
		return helperResult{}, fmt.Errorf("%s: %w", req.Op, context.Cause(ctx))
	}
	rb, err := readNoFollow(filepath.Join(dir, helperResultFile), 1<<20)
	if err != nil {
		if startErr != nil {
			return helperResult{}, startErr
		}
		return helperResult{}, fmt.Errorf("the helper %s left no result: %w", unit, err)
	}
	var res helperResult
	if err := json.Unmarshal(rb, &res); err != nil {
		return helperResult{}, fmt.Errorf("the helper's result: %w", err)
	}
	if !res.OK {
		return res, errors.New(res.Error)
	}
	return res, nil
}

// startUnit starts unit and waits for systemd's job to finish.
func startUnit(ctx context.Context, conn *sddbus.Conn, unit string) error {
	ch := make(chan string, 1)
	if _, err := conn.StartUnitContext(ctx, unit, "replace", ch); err != nil {
		return fmt.Errorf("starting %s: %w", unit, err)
	}
	select {
	case r := <-ch:
		if r != "done" {
			return fmt.Errorf("starting %s: %s", unit, r)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("starting %s: %w", unit, context.Cause(ctx))
	}
}

func stopUnit(ctx context.Context, conn *sddbus.Conn, unit string) error {
	ch := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, unit, "replace", ch); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retireSlot has the helper stop and remove a slot; it outlives ctx.
func (d *Deployer) retireSlot(ctx context.Context, conn *sddbus.Conn, name string, port int, events agent.EventSink) bool {
	ctx, cancel := cleanupContext(ctx, 60*time.Second)
	defer cancel()
	unit := SlotUnit(name, port)
	events.Emit(agentproto.LevelInfo, "stopping and removing "+unit, nil)
	if _, err := d.helper(ctx, conn, helperRequest{Op: opRetire, Name: name, Port: port}, events); err != nil {
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not remove %s: %v", unit, err), nil)
		return false
	}
	return true
}

// waitUnitHealthy probes the slot until it answers 2xx or 3xx, the
// timeout passes, the unit fails or restarts, or ctx ends.
func (d *Deployer) waitUnitHealthy(ctx context.Context, conn *sddbus.Conn, unit string, port int, path string, timeout time.Duration, events agent.EventSink) (answer, error) {
	return d.waitAnswer(ctx, "http://127.0.0.1:"+strconv.Itoa(port)+path, path, timeout, events, func(ctx context.Context) string {
		if why := unitStopped(ctx, conn, unit); why != "" {
			return "the unit " + why
		}
		return ""
	})
}

// unitStopped says how the unit stopped running, or "" while it runs and
// has not restarted.
func unitStopped(ctx context.Context, conn *sddbus.Conn, unit string) string {
	props, err := conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return ""
	}
	active, _ := props["ActiveState"].(string)
	sub, _ := props["SubState"].(string)
	switch {
	case active == "failed":
		return "failed"
	case active == "inactive":
		return "exited"
	case sub == "auto-restart":
		return "exited and is being restarted"
	}
	if sp, err := conn.GetServicePropertyContext(ctx, unit, "NRestarts"); err == nil {
		if n, ok := sp.Value.Value().(uint32); ok && n > 0 {
			return fmt.Sprintf("exited and was restarted (%d times)", n)
		}
	}
	return ""
}

// journalTail emits the last lines of a slot's journal.
func (d *Deployer) journalTail(ctx context.Context, unit string, events agent.EventSink) {
	if d.opts.Journal == nil {
		return
	}
	ctx, cancel := cleanupContext(ctx, 10*time.Second)
	defer cancel()
	res, err := d.opts.Journal.ReadLogs(ctx, agentproto.LogsReadPayload{Source: agentproto.LogSourceJournal, Unit: unit, Lines: 20}, noEvents{})
	if err != nil || len(res.Lines) == 0 {
		return
	}
	msgs := make([]string, len(res.Lines))
	for i, l := range res.Lines {
		msgs[i] = l.Message
	}
	events.Emit(agentproto.LevelWarn, fmt.Sprintf("the last %d lines of the journal of %s", len(msgs), unit), map[string]any{"lines": msgs})
}

// noEvents drops events.
type noEvents struct{}

func (noEvents) Emit(string, string, any) {}

// liveSlot is the recorded live slot of application name.
func (d *Deployer) liveSlot(name string) (liveSlot, bool) {
	b, err := readNoFollow(filepath.Join(d.svcDir(name), "live.json"), 64<<10)
	if err != nil {
		return liveSlot{}, false
	}
	var l liveSlot
	if json.Unmarshal(b, &l) != nil || l.Port == 0 {
		return liveSlot{}, false
	}
	return l, true
}

func (d *Deployer) setLive(l liveSlot) error {
	b, _ := json.Marshal(l)
	return writeAtomic(d.svcDir(l.Name), "live.json", b, 0o600, nil)
}

// serviceApp finds the service application of id by its live slot.
func (d *Deployer) serviceApp(id string) (liveSlot, bool) {
	if d.opts.StateDir == "" {
		return liveSlot{}, false
	}
	entries, err := os.ReadDir(filepath.Join(d.opts.StateDir, "apps"))
	if err != nil {
		return liveSlot{}, false
	}
	for _, e := range entries {
		if l, ok := d.liveSlot(e.Name()); ok && l.AppID == id {
			return l, true
		}
	}
	return liveSlot{}, false
}

// LiveServiceUpstreams maps the ids of the service applications on this
// server to the address of their live slot: the proxy's upstreams for
// them.
func (d *Deployer) LiveServiceUpstreams(context.Context) (map[string]string, error) {
	out := map[string]string{}
	if d.opts.StateDir == "" {
		return out, nil
	}
	entries, err := os.ReadDir(filepath.Join(d.opts.StateDir, "apps"))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	} else if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if l, ok := d.liveSlot(e.Name()); ok {
			out[l.AppID] = l.upstream()
		}
	}
	return out, nil
}

// serviceSlots is the state of each slot of application name.
func (d *Deployer) serviceSlots(ctx context.Context, conn *sddbus.Conn, name string, live liveSlot) ([]agentproto.ServiceSlot, error) {
	slots, err := listSlots(d.unitDir(), name)
	if err != nil {
		return nil, err
	}
	out := []agentproto.ServiceSlot{}
	for _, s := range slots {
		st := agentproto.ServiceSlot{Unit: s.Unit, Port: s.Port, Release: s.Release, Live: s.Port == live.Port}
		if props, err := conn.GetUnitPropertiesContext(ctx, s.Unit); err == nil {
			st.ActiveState, _ = props["ActiveState"].(string)
			st.SubState, _ = props["SubState"].(string)
		}
		out = append(out, st)
	}
	return out, nil
}

// serviceLogs reads the journal of the live slot of a service
// application.
func (d *Deployer) serviceLogs(ctx context.Context, live liveSlot, p agentproto.AppLogsPayload, n int, events agent.EventSink) (agentproto.AppLogsResult, error) {
	if d.opts.Journal == nil {
		return agentproto.AppLogsResult{}, errors.New("this agent cannot read the journal")
	}
	conn, err := d.systemd(ctx)
	if err != nil {
		return agentproto.AppLogsResult{}, err
	}
	defer conn.Close()
	unit := SlotUnit(live.Name, live.Port)
	res := agentproto.AppLogsResult{Unit: unit}
	if res.Slots, err = d.serviceSlots(ctx, conn, live.Name, live); err != nil {
		return agentproto.AppLogsResult{}, err
	}
	for _, s := range res.Slots {
		if s.Live {
			res.State = s.SubState
		}
	}
	if props, err := conn.GetUnitPropertiesContext(ctx, unit); err == nil {
		if us, ok := props["ActiveEnterTimestamp"].(uint64); ok && us > 0 {
			res.StartedAt = time.UnixMicro(int64(us)).UTC()
		}
	}
	if sp, err := conn.GetServicePropertyContext(ctx, unit, "NRestarts"); err == nil {
		if v, ok := sp.Value.Value().(uint32); ok {
			res.RestartCount = int(v)
		}
	}
	lr, err := d.opts.Journal.ReadLogs(ctx, agentproto.LogsReadPayload{Source: agentproto.LogSourceJournal, Unit: unit, Lines: n}, events)
	if err != nil {
		return agentproto.AppLogsResult{}, err
	}
	var lines []agentproto.LogLine
	for _, l := range lr.Lines {
		if p.Since == nil || !l.At.Before(*p.Since) {
			lines = append(lines, l)
		}
	}
	res.Lines = lines
	if res.Lines == nil {
		res.Lines = []agentproto.LogLine{}
	}
	return res, nil
}

// serviceRemove has the helper remove every slot and release of
// application name, and forgets it.
func (d *Deployer) serviceRemove(ctx context.Context, p agentproto.RemovePayload, name string, events agent.EventSink) error {
	conn, err := d.systemd(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("stopping and removing the slots and releases of service application %s", name), nil)
	if _, err := d.helper(ctx, conn, helperRequest{Op: opRemove, Name: name}, events); err != nil {
		return fmt.Errorf("removing service application %s: %w", name, err)
	}
	return os.RemoveAll(d.svcDir(name))
}

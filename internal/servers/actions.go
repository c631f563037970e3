package servers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// Log line bounds of service.logs and container.logs.
const (
	DefaultLogLines = 200
	MaxLogLines     = 500
)

// Unit names as systemd accepts them (letters, digits, ":-_.\@"), ending
// in .service; no path separators or shell metacharacters.
var unitPattern = regexp.MustCompile(`^[A-Za-z0-9:_.@\\-]{1,247}\.service$`)

// Container names and ids as Docker accepts them.
var containerPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)

// ValidUnit reports whether unit is a systemd service unit name.
func ValidUnit(unit string) bool {
	return unitPattern.MatchString(unit) && !strings.HasPrefix(unit, "-") && !strings.Contains(unit, "..")
}

// ValidContainer reports whether name is a Docker container name or id.
func ValidContainer(name string) bool { return containerPattern.MatchString(name) }

// decodeStrict decodes a payload, refusing unknown fields.
func decodeStrict(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fault.Invalidf("payload", "does not match the action's payload: %s", jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fault.Invalidf("payload", "must be one JSON object")
	}
	return nil
}

func jsonProblem(err error) string {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		return "field " + ute.Field + " must be " + ute.Type.String()
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "json: unknown field ") {
		return "unknown field " + strings.TrimPrefix(msg, "json: unknown field ")
	}
	return "malformed"
}

func lines(n *int) (int, error) {
	if n == nil {
		return DefaultLogLines, nil
	}
	if *n < 1 || *n > MaxLogLines {
		return 0, fault.Invalidf("payload.lines", "must be an integer between 1 and %d", MaxLogLines)
	}
	return *n, nil
}

// The actions that share a payload, by type.
var (
	serviceActions = map[string]agentproto.JobType[agentproto.ServicePayload, agentproto.UnitState]{
		agentproto.JobServiceStart: agentproto.ServiceStart, agentproto.JobServiceStop: agentproto.ServiceStop,
		agentproto.JobServiceRestart: agentproto.ServiceRestart}
	containerActions = map[string]agentproto.JobType[agentproto.ContainerPayload, agentproto.ContainerState]{
		agentproto.JobContainerStart: agentproto.ContainerStart, agentproto.JobContainerStop: agentproto.ContainerStop,
		agentproto.JobContainerRestart: agentproto.ContainerRestart}
)

// ValidateAction checks an action's type and payload and returns the
// work to queue, with its payload normalized.
func ValidateAction(actionType string, raw json.RawMessage) (jobs.Work, error) {
	switch actionType {
	case agentproto.JobAgentPing:
		var p agentproto.PingPayload
		if err := decodeStrict(raw, &p); err != nil {
			return jobs.Work{}, err
		}
		if len(p.Message) > 256 {
			return jobs.Work{}, fault.Invalidf("payload.message", "at most 256 characters")
		}
		return jobs.Of(agentproto.AgentPing, p), nil
	case agentproto.JobServiceStart, agentproto.JobServiceStop, agentproto.JobServiceRestart:
		var p agentproto.ServicePayload
		if err := decodeStrict(raw, &p); err != nil {
			return jobs.Work{}, err
		}
		if !ValidUnit(p.Unit) {
			return jobs.Work{}, fault.Invalidf("payload.unit", "must be a systemd unit name ending in .service")
		}
		return jobs.Of(serviceActions[actionType], p), nil
	case agentproto.JobServiceLogs:
		var p struct {
			Unit  string `json:"unit"`
			Lines *int   `json:"lines"`
		}
		if err := decodeStrict(raw, &p); err != nil {
			return jobs.Work{}, err
		}
		if !ValidUnit(p.Unit) {
			return jobs.Work{}, fault.Invalidf("payload.unit", "must be a systemd unit name ending in .service")
		}
		n, err := lines(p.Lines)
		if err != nil {
			return jobs.Work{}, err
		}
		return jobs.Of(agentproto.ServiceLogs, agentproto.ServiceLogsPayload{Unit: p.Unit, Lines: n}), nil
	case agentproto.JobContainerStart, agentproto.JobContainerStop, agentproto.JobContainerRestart, agentproto.JobContainerInspect:
		var p agentproto.ContainerPayload
		if err := decodeStrict(raw, &p); err != nil {
			return jobs.Work{}, err
		}
		if !ValidContainer(p.Container) {
			return jobs.Work{}, fault.Invalidf("payload.container", "must be a Docker container name or id")
		}
		if actionType == agentproto.JobContainerInspect {
			return jobs.Of(agentproto.ContainerInspect, p), nil
		}
		return jobs.Of(containerActions[actionType], p), nil
	case agentproto.JobContainerLogs:
		var p struct {
			Container string `json:"container"`
			Lines     *int   `json:"lines"`
		}
		if err := decodeStrict(raw, &p); err != nil {
			return jobs.Work{}, err
		}
		if !ValidContainer(p.Container) {
			return jobs.Work{}, fault.Invalidf("payload.container", "must be a Docker container name or id")
		}
		n, err := lines(p.Lines)
		if err != nil {
			return jobs.Work{}, err
		}
		return jobs.Of(agentproto.ContainerLogs, agentproto.ContainerLogsPayload{Container: p.Container, Lines: n}), nil
	case agentproto.JobDockerPrune:
		p, err := validatePrune(raw)
		if err != nil {
			return jobs.Work{}, err
		}
		return jobs.Of(agentproto.DockerPrune, p), nil
	}
	return jobs.Work{}, fault.Invalidf("type", "must be one of %s", strings.Join(ActionTypes, ", "))
}

// registerActions registers the job types of server actions.
func registerActions(j *jobs.Service) {
	j.Register(agentproto.AgentPing, jobs.Spec{Timeout: 30 * time.Second})
	for _, t := range serviceActions {
		j.Register(t, jobs.Spec{Timeout: 2 * time.Minute})
	}
	for _, t := range containerActions {
		j.Register(t, jobs.Spec{Timeout: 2 * time.Minute})
	}
	j.Register(agentproto.ServiceLogs, jobs.Spec{Timeout: time.Minute})
	j.Register(agentproto.ContainerLogs, jobs.Spec{Timeout: time.Minute})
	j.Register(agentproto.ContainerInspect, jobs.Spec{Timeout: time.Minute})
	// A prune's removal waits for the container deploys running (up to
	// their own timeout) before it removes anything.
	j.Register(agentproto.DockerPrune, jobs.Spec{Timeout: 20 * time.Minute})
}

// ActionTypes are the job types a server action may have.
var ActionTypes = []string{agentproto.JobAgentPing, agentproto.JobServiceStart, agentproto.JobServiceStop,
	agentproto.JobServiceRestart, agentproto.JobServiceLogs, agentproto.JobContainerStart, agentproto.JobContainerStop,
	agentproto.JobContainerRestart, agentproto.JobContainerLogs, agentproto.JobContainerInspect, agentproto.JobDockerPrune}

// pruneID is a full image or network id as a dry run lists it.
var pruneID = regexp.MustCompile(`^(sha256:)?[0-9a-f]{64}$`)

// validatePrune checks a docker.prune payload: a dry run names nothing; a
// removal names what a dry run listed.
func validatePrune(raw json.RawMessage) (agentproto.DockerPrunePayload, error) {
	var in struct {
		DryRun     bool     `json:"dry_run"`
		ImageIDs   []string `json:"image_ids"`
		NetworkIDs []string `json:"network_ids"`
	}
	if err := decodeStrict(raw, &in); err != nil {
		return agentproto.DockerPrunePayload{}, err
	}
	var errs fault.Fields
	for _, f := range []struct {
		name string
		ids  []string
	}{{"payload.image_ids", in.ImageIDs}, {"payload.network_ids", in.NetworkIDs}} {
		switch {
		case in.DryRun && len(f.ids) > 0:
			errs.Add(f.name, "a dry run removes nothing; leave it out")
		case len(f.ids) > agentproto.MaxPruneItems:
			errs.Add(f.name, "at most %d", agentproto.MaxPruneItems)
		default:
			for i, id := range f.ids {
				if !pruneID.MatchString(id) {
					errs.Add(fmt.Sprintf("%s[%d]", f.name, i), "must be a full id (64 hex digits) as a dry run lists it")
				} else if slices.Contains(f.ids[:i], id) {
					errs.Add(fmt.Sprintf("%s[%d]", f.name, i), "is named twice")
				}
			}
		}
	}
	if !in.DryRun && len(in.ImageIDs)+len(in.NetworkIDs) == 0 {
		errs.Add("payload.image_ids", "name the images or networks to remove (from a dry run), or set dry_run")
	}
	if err := errs.Err(); err != nil {
		return agentproto.DockerPrunePayload{}, err
	}
	return agentproto.DockerPrunePayload{DryRun: in.DryRun, ImageIDs: in.ImageIDs, NetworkIDs: in.NetworkIDs}, nil
}

// housekeeping are the action types only an agent with
// agentproto.CapabilityDockerHousekeeping runs.
var housekeeping = []string{agentproto.JobContainerInspect, agentproto.JobDockerPrune}

// QueueAction validates and queues an action on a server. created is false
// when an earlier request with the same idempotency key is returned.
func (s *Service) QueueAction(ctx context.Context, c audit.Caller, serverID, actionType string, payload json.RawMessage, key string) (jobs.Job, bool, error) {
	w, err := ValidateAction(actionType, payload)
	if err != nil {
		return jobs.Job{}, false, err
	}
	if len(key) > 255 {
		return jobs.Job{}, false, fault.Invalidf("idempotency_key", "at most 255 characters")
	}
	srv, err := s.store.Server(ctx, serverID)
	if err != nil {
		return jobs.Job{}, false, err
	}
	if srv.Status == Revoked {
		return jobs.Job{}, false, fault.Conflictf("server-revoked", "The server is revoked; it runs no more jobs.")
	}
	if slices.Contains(housekeeping, actionType) {
		if srv.Facts == nil || !slices.Contains(srv.Facts.Capabilities, agentproto.CapabilityDockerHousekeeping) {
			return jobs.Job{}, false, fault.Conflictf("agent-upgrade-required",
				"The agent of server %s (version %s) does not run %s; upgrade the agent on the server, then try again.",
				srv.Name, cmp.Or(srv.AgentVersion, "unknown"), actionType)
		}
	}
	if pp, ok := w.Payload().(agentproto.DockerPrunePayload); ok {
		if s.keptImages == nil {
			return jobs.Job{}, false, errors.New("no image keeper is set: a prune would not know what the applications keep")
		}
		if pp.KeepImageIDs, err = s.keptImages(ctx, serverID); err != nil {
			return jobs.Job{}, false, err
		}
		w = jobs.Of(agentproto.DockerPrune, pp)
	}
	j, created, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: serverID, Work: w, IdempotencyKey: key, CreatedBy: c.Actor.ID})
	if err != nil || !created {
		return j, created, err
	}
	return j, true, s.audit.Record(ctx, c, ActionQueued, audit.Target{Type: "server", ID: serverID}, actionDetails(j.ID, actionType, srv.Name, w.Payload()))
}

// actionDetails are the audit details of a queued action: its job and
// type, the server's name and the unit or container it acts on, so that
// the log reads "restarted container web on server web-1".
func actionDetails(jobID, actionType, server string, p any) map[string]any {
	d := map[string]any{"job_id": jobID, "type": actionType, "server": server}
	switch v := p.(type) {
	case agentproto.ServicePayload:
		d["unit"] = v.Unit
	case agentproto.ServiceLogsPayload:
		d["unit"] = v.Unit
	case agentproto.ContainerPayload:
		d["container"] = v.Container
	case agentproto.ContainerLogsPayload:
		d["container"] = v.Container
	case agentproto.DockerPrunePayload:
		d["dry_run"] = v.DryRun
		d["images"] = len(v.ImageIDs)
		d["networks"] = len(v.NetworkIDs)
	}
	return d
}

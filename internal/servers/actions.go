package servers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"

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

// ValidateAction checks an action's type and payload and returns the
// normalized payload to queue.
func ValidateAction(actionType string, raw json.RawMessage) (any, error) {
	switch actionType {
	case agentproto.JobAgentPing:
		var p agentproto.PingPayload
		if err := decodeStrict(raw, &p); err != nil {
			return nil, err
		}
		if len(p.Message) > 256 {
			return nil, fault.Invalidf("payload.message", "at most 256 characters")
		}
		return p, nil
	case agentproto.JobServiceStart, agentproto.JobServiceStop, agentproto.JobServiceRestart:
		var p agentproto.ServicePayload
		if err := decodeStrict(raw, &p); err != nil {
			return nil, err
		}
		if !ValidUnit(p.Unit) {
			return nil, fault.Invalidf("payload.unit", "must be a systemd unit name ending in .service")
		}
		return p, nil
	case agentproto.JobServiceLogs:
		var p struct {
			Unit  string `json:"unit"`
			Lines *int   `json:"lines"`
		}
		if err := decodeStrict(raw, &p); err != nil {
			return nil, err
		}
		if !ValidUnit(p.Unit) {
			return nil, fault.Invalidf("payload.unit", "must be a systemd unit name ending in .service")
		}
		n, err := lines(p.Lines)
		if err != nil {
			return nil, err
		}
		return agentproto.ServiceLogsPayload{Unit: p.Unit, Lines: n}, nil
	case agentproto.JobContainerStart, agentproto.JobContainerStop, agentproto.JobContainerRestart:
		var p agentproto.ContainerPayload
		if err := decodeStrict(raw, &p); err != nil {
			return nil, err
		}
		if !ValidContainer(p.Container) {
			return nil, fault.Invalidf("payload.container", "must be a Docker container name or id")
		}
		return p, nil
	case agentproto.JobContainerLogs:
		var p struct {
			Container string `json:"container"`
			Lines     *int   `json:"lines"`
		}
		if err := decodeStrict(raw, &p); err != nil {
			return nil, err
		}
		if !ValidContainer(p.Container) {
			return nil, fault.Invalidf("payload.container", "must be a Docker container name or id")
		}
		n, err := lines(p.Lines)
		if err != nil {
			return nil, err
		}
		return agentproto.ContainerLogsPayload{Container: p.Container, Lines: n}, nil
	}
	return nil, fault.Invalidf("type", "must be one of agent.ping, service.start, service.stop, service.restart, service.logs, container.start, container.stop, container.restart, container.logs")
}

// QueueAction validates and queues an action on a server. created is false
// when an earlier request with the same idempotency key is returned.
func (s *Service) QueueAction(ctx context.Context, actor audit.Actor, c audit.Entry, serverID, actionType string, payload json.RawMessage, key string) (jobs.Job, bool, error) {
	p, err := ValidateAction(actionType, payload)
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
	j, created, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: serverID, Type: actionType, Payload: p, IdempotencyKey: key, CreatedBy: actor.ID})
	if err != nil || !created {
		return j, created, err
	}
	return j, true, s.record(ctx, actor, c, ActionQueued, serverID, actionDetails(j.ID, actionType, srv.Name, p))
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
	}
	return d
}

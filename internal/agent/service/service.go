// Package service runs the service.* jobs and the journal reads of
// logs.read: systemd units are started, stopped and restarted over D-Bus
// (github.com/coreos/go-systemd, no cgo) and their logs are read with
// journalctl.
package service

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/logs"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// unitPattern is a service unit name as the control plane accepts it;
// checked again here, before any name reaches systemd or journalctl.
var unitPattern = regexp.MustCompile(`^[A-Za-z0-9:_.@\\-]{1,247}\.service$`)

// ValidUnit reports whether unit is the name of a systemd service unit:
// letters, digits and ":_.@\-", ending in .service, not starting with "-"
// and without "..".
func ValidUnit(unit string) bool {
	return unitPattern.MatchString(unit) && !strings.HasPrefix(unit, "-") && !strings.Contains(unit, "..")
}

func checkUnit(unit string) error {
	if !ValidUnit(unit) {
		return fmt.Errorf("invalid unit name %q: must be a systemd service unit name ending in .service", unit)
	}
	return nil
}

// Systemd runs service jobs against the host's systemd.
type Systemd struct {
	// Journalctl is the journalctl binary; empty means journalctl on PATH.
	Journalctl string
	// JournalDirs are where journald keeps its files; nil means
	// /run/log/journal and /var/log/journal. A read that finds no line on
	// a host with no journal file in them says so instead of answering
	// with none.
	JournalDirs []string
	// Connect opens the connection to systemd; nil means the system bus,
	// or for root without a bus, systemd's private socket.
	Connect func(ctx context.Context) (*sddbus.Conn, error)
}

// Register adds the service.* job types to r.
func (s *Systemd) Register(r agent.Registry) {
	agent.Handle(r, agentproto.ServiceStart, s.action("start"))
	agent.Handle(r, agentproto.ServiceStop, s.action("stop"))
	agent.Handle(r, agentproto.ServiceRestart, s.action("restart"))
	agent.Handle(r, agentproto.ServiceLogs, s.logs)
}

func (s *Systemd) connect(ctx context.Context) (*sddbus.Conn, error) {
	return Dial(ctx, s.Connect)
}

// Dial opens a connection to systemd with connect; nil means the system
// bus.
func Dial(ctx context.Context, connect func(context.Context) (*sddbus.Conn, error)) (*sddbus.Conn, error) {
	if connect == nil {
		connect = sddbus.NewWithContext
	}
	c, err := connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd over D-Bus: %w", err)
	}
	return c, nil
}

// action returns the handler of service.<verb>: it enqueues the job with
// mode "replace", waits for its result and returns the unit's state after
// it (agentproto.UnitState). A unit systemd does not know fails the job
// without any action.
func (s *Systemd) action(verb string) func(context.Context, agent.Call[agentproto.ServicePayload]) (agentproto.UnitState, error) {
	return func(ctx context.Context, c agent.Call[agentproto.ServicePayload]) (agentproto.UnitState, error) {
		p, events := c.Payload, c.Events
		if err := checkUnit(p.Unit); err != nil {
			return agentproto.UnitState{}, err
		}
		conn, err := s.connect(ctx)
		if err != nil {
			return agentproto.UnitState{}, err
		}
		defer conn.Close()

		before, err := unitState(ctx, conn, p.Unit)
		if err != nil {
			return agentproto.UnitState{}, err
		}
		// A unit whose file is gone may still run; it can be stopped.
		if before.LoadState == "not-found" && (verb != "stop" || before.ActiveState == "inactive") {
			events.Emit(agentproto.LevelError, "no such unit: "+p.Unit, before)
			return agentproto.UnitState{}, fmt.Errorf("no such unit: %s (systemd has no unit file for it)", p.Unit)
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("%s is %s (%s); %s it", p.Unit, before.ActiveState, before.SubState, verbing(verb)), before)

		done := make(chan string, 1)
		var id int
		switch verb {
		case "start":
			id, err = conn.StartUnitContext(ctx, p.Unit, "replace", done)
		case "stop":
			id, err = conn.StopUnitContext(ctx, p.Unit, "replace", done)
		case "restart":
			id, err = conn.RestartUnitContext(ctx, p.Unit, "replace", done)
		}
		if err != nil {
			return agentproto.UnitState{}, fmt.Errorf("%s %s: %w", verb, p.Unit, err)
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("systemd job %d queued: %s %s (mode replace)", id, verb, p.Unit), nil)
		var result string
		select {
		case result = <-done:
		case <-ctx.Done():
			return agentproto.UnitState{}, fmt.Errorf("waiting for systemd job %d (%s %s): %w", id, verb, p.Unit, ctx.Err())
		}
		level := agentproto.LevelInfo
		if result != "done" {
			level = agentproto.LevelError
		}
		events.Emit(level, fmt.Sprintf("systemd job %d finished: %s", id, result), map[string]string{"result": result})

		after, err := unitState(ctx, conn, p.Unit)
		if err != nil {
			return agentproto.UnitState{}, err
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("%s is %s (%s)", p.Unit, after.ActiveState, after.SubState), after)
		if result != "done" {
			return after, fmt.Errorf("%s %s: the systemd job ended %q (see service.logs for %s)", verb, p.Unit, result, p.Unit)
		}
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

// unitState reads a unit's load, active and sub state. systemd loads the
// unit to answer; one it has no file for is "not-found".
func unitState(ctx context.Context, conn *sddbus.Conn, unit string) (agentproto.UnitState, error) {
	props, err := conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return agentproto.UnitState{}, fmt.Errorf("reading the state of %s: %w", unit, err)
	}
	st := agentproto.UnitState{Unit: unit}
	for name, dst := range map[string]*string{"LoadState": &st.LoadState, "ActiveState": &st.ActiveState, "SubState": &st.SubState} {
		v, ok := props[name].(string)
		if !ok {
			return agentproto.UnitState{}, fmt.Errorf("reading the state of %s: systemd sent no %s", unit, name)
		}
		*dst = v
	}
	return st, nil
}

// logs runs service.logs: the last lines of a unit's journal, without a
// cursor.
func (s *Systemd) logs(ctx context.Context, c agent.Call[agentproto.ServiceLogsPayload]) (agentproto.LogsResult, error) {
	p := c.Payload
	if err := checkUnit(p.Unit); err != nil {
		return agentproto.LogsResult{}, err
	}
	n, err := logs.Lines(p.Lines)
	if err != nil {
		return agentproto.LogsResult{}, fmt.Errorf("invalid service.logs payload: %w", err)
	}
	res, err := s.read(ctx, journalQuery{unit: p.Unit, lines: n}, c.Events)
	if err != nil {
		return agentproto.LogsResult{}, err
	}
	res.Cursor = ""
	return res, nil
}

// ReadLogs reads a unit's journal for logs.read (logs.Reader): the newest
// lines, or with a cursor the first lines after it. The result's cursor is
// that of the last line returned, or the cursor given if there is none.
func (s *Systemd) ReadLogs(ctx context.Context, p agentproto.LogsReadPayload, events agent.EventSink) (agentproto.LogsResult, error) {
	if err := checkUnit(p.Unit); err != nil {
		return agentproto.LogsResult{}, err
	}
	if p.Priority != nil && (*p.Priority < 0 || *p.Priority > 7) {
		return agentproto.LogsResult{}, fmt.Errorf("invalid priority %d: must be 0 (emergency) to 7 (debug)", *p.Priority)
	}
	if p.Cursor != "" && !validJournalCursor(p.Cursor) {
		return agentproto.LogsResult{}, errors.New("invalid journal cursor")
	}
	n, err := logs.ReadLines(p.Lines)
	if err != nil {
		return agentproto.LogsResult{}, err
	}
	return s.read(ctx, journalQuery{unit: p.Unit, lines: n, priority: p.Priority, after: p.Cursor}, events)
}

func (s *Systemd) read(ctx context.Context, q journalQuery, events agent.EventSink) (agentproto.LogsResult, error) {
	what := fmt.Sprintf("the last %d lines", q.lines)
	if q.after != "" {
		what = fmt.Sprintf("up to %d lines after the cursor", q.lines)
	}
	if q.priority != nil {
		what += fmt.Sprintf(" of priority %d or more urgent", *q.priority)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("reading %s of the journal of %s", what, q.unit), nil)
	entries, err := s.readJournal(ctx, q)
	if err != nil {
		return agentproto.LogsResult{}, err
	}
	all := make([]agentproto.LogLine, len(entries))
	for i, e := range entries {
		all[i] = e.line
	}
	// Over the size budget: a read of the newest lines drops the oldest,
	// a read after a cursor the newest (read again from the cursor).
	kept := logs.Fit(all, q.after == "")
	if q.after == "" {
		entries = entries[len(entries)-len(kept):]
	} else {
		entries = entries[:len(kept)]
	}
	res := agentproto.LogsResult{Lines: kept, Cursor: q.after}
	if len(entries) > 0 {
		res.Cursor = entries[len(entries)-1].cursor
	}
	msg := fmt.Sprintf("read %d lines", len(kept))
	if len(kept) < len(all) {
		msg += fmt.Sprintf(" (%d more did not fit in one result)", len(all)-len(kept))
	}
	events.Emit(agentproto.LevelInfo, msg, nil)
	return res, nil
}

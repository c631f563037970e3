package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// PingExecutor runs agent.ping: it echoes the payload's message and returns
// fresh host facts (agentproto.PingResult), emitting one info event "pong".
type PingExecutor struct {
	Version string
}

// Run implements Executor.
func (p PingExecutor) Run(ctx context.Context, job agentproto.Job, _ map[string]string, events EventSink) (any, any, error) {
	var payload agentproto.PingPayload
	if len(job.Payload) > 0 && string(job.Payload) != "null" {
		if err := json.Unmarshal(job.Payload, &payload); err != nil {
			return nil, nil, fmt.Errorf("invalid agent.ping payload: %w", err)
		}
	}
	events.Emit(agentproto.LevelInfo, "pong", nil)
	return agentproto.PingResult{
		Message:      payload.Message,
		AgentVersion: p.Version,
		Facts:        CollectFacts(p.Version),
		AgentTime:    time.Now().UTC(),
	}, nil, ctx.Err()
}

package agent

import (
	"context"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Ping runs agent.ping: it echoes the payload's message and returns
// fresh host facts, emitting one info event "pong". A ping may come
// without a payload.
type Ping struct {
	Version string
}

// Register adds agent.ping to r.
func (p Ping) Register(r Registry) {
	Handle(r, agentproto.AgentPing, p.run, OptionalPayload())
}

func (p Ping) run(ctx context.Context, c Call[agentproto.PingPayload]) (agentproto.PingResult, error) {
	c.Events.Emit(agentproto.LevelInfo, "pong", nil)
	return agentproto.PingResult{
		Message:      c.Payload.Message,
		AgentVersion: p.Version,
		Facts:        CollectFacts(p.Version),
		AgentTime:    time.Now().UTC(),
	}, ctx.Err()
}

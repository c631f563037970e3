package agent

import (
	"context"
	"time"
)

// Loop is a background loop that an Agent runs next to its own, such as
// the proxy's traffic report.
type Loop struct {
	// Name names the loop in the agent's log.
	Name string
	// Run runs until ctx ends and then returns nil; c is the agent's
	// control plane client. An error before that is logged and Run is
	// called again after the agent's backoff (RunLoop); ErrRevoked ends
	// it for good.
	Run func(ctx context.Context, c *Client) error
}

// extraLoop runs l until ctx ends.
func (a *Agent) extraLoop(ctx context.Context, l Loop) {
	b := a.opts.Backoff
	RunLoop(ctx, a.log, l.Name, &b, func(ctx context.Context) (time.Duration, error) {
		if err := l.Run(ctx, a.client); err != nil {
			return 0, err
		}
		// Done early without an error: nothing more to run.
		<-ctx.Done()
		return 0, nil
	})
}

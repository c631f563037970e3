package deploy

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// DesiredProxy fetches the server's current desired proxy state from the
// control plane (GET /agent/v1/proxy); *agent.Client satisfies it.
type DesiredProxy interface {
	Proxy(ctx context.Context) (agentproto.ProxyConfig, error)
}

// staleRetries bounds how often one apply fetches the desired state again
// after a newer revision was applied under it.
const staleRetries = 5

// desiredProxy is the proxy state to apply now: the control plane's
// current one, so that a change made while the job ran (a domain deleted,
// a TLS mode changed) is not undone by the state the job was made with;
// that one (frozen) only when the current one cannot be had.
func (d *Deployer) desiredProxy(ctx context.Context, frozen agentproto.ProxyConfig, events agent.EventSink) agentproto.ProxyConfig {
	if d.opts.Desired == nil {
		return frozen
	}
	cfg, err := d.opts.Desired.Proxy(ctx)
	switch {
	case err != nil && agent.StatusOf(err) == http.StatusNotFound:
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("the control plane does not serve the current proxy state; applying the job's (revision %d)", frozen.Revision), nil)
		return frozen
	case err != nil:
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("could not fetch the current proxy state (%v); applying the job's (revision %d)", err, frozen.Revision), nil)
		return frozen
	case cfg.Revision < frozen.Revision:
		events.Emit(agentproto.LevelWarn, fmt.Sprintf("the control plane's proxy state (revision %d) is older than the job's (revision %d); applying the job's", cfg.Revision, frozen.Revision), nil)
		return frozen
	}
	if cfg.Sites == nil {
		cfg.Sites = []agentproto.ProxySite{}
	}
	return cfg
}

// applyDesired applies the current desired proxy state with own's
// upstreams (see switchboard.apply) and returns the state applied. When
// the proxy refuses it because a newer revision was applied meanwhile (a
// proxy.apply job ran), it fetches the state again.
func (d *Deployer) applyDesired(ctx context.Context, frozen agentproto.ProxyConfig, own map[string]string, events agent.EventSink) (agentproto.ProxyConfig, error) {
	for attempt := 0; ; attempt++ {
		cfg := d.desiredProxy(ctx, frozen, events)
		err := d.sw.apply(ctx, cfg, own)
		if err == nil || !proxy.IsStale(err) || attempt == staleRetries || ctx.Err() != nil {
			return cfg, err
		}
		events.Emit(agentproto.LevelInfo, fmt.Sprintf("%v; fetching the current proxy state again", err), nil)
	}
}

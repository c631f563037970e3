package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/health"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// healthFlags configure the application health probes.
type healthFlags struct {
	HealthProbeInterval time.Duration `name:"health-probe-interval" env:"CAPSTAN_AGENT_HEALTH_PROBE_INTERVAL" default:"30s" help:"How often the applications' health paths are probed on their loopback ports and reported."`
}

// healthLoop probes the applications every interval and reports the
// results. Without a Docker engine there is nothing to probe.
func healthLoop(interval time.Duration, log *slog.Logger) agent.Loop {
	return agent.Loop{Name: "health probes", Run: func(ctx context.Context, c *agent.Client) error {
		docker, err := proxy.LocalDocker()
		if err != nil {
			log.Info("no application health probes: no Docker client", "err", err.Error())
			return nil
		}
		defer docker.Close()
		p := health.New(docker)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			probes, err := p.Probe(ctx)
			switch {
			case err != nil:
				log.Debug("application health probes", "err", err.Error())
			case len(probes) > 0:
				if err := c.PostHealth(ctx, agentproto.HealthReport{Probes: probes}); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}}
}

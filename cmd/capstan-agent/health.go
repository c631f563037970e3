package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/deploy"
	"github.com/capstan-dev/capstan/internal/agent/health"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// healthFlags configure the application health probes.
type healthFlags struct {
	HealthProbeInterval time.Duration `name:"health-probe-interval" env:"CAPSTAN_AGENT_HEALTH_PROBE_INTERVAL" default:"30s" help:"How often the applications' health paths are probed on their loopback ports and reported."`
}

// idleTargetRounds is how many rounds with nothing to report pass before
// the agent asks the control plane again which applications to probe.
const idleTargetRounds = 10

// healthLoop probes the applications every interval and reports the
// results, asking each time which applications to probe: those of every
// kind with a live release (container applications' live containers,
// compose applications' web services, service applications' live slots
// found in stateDir). With nothing to probe, it asks every
// idleTargetRounds rounds.
func healthLoop(interval time.Duration, stateDir string, log *slog.Logger) agent.Loop {
	return agent.Loop{Name: "health probes", Run: func(ctx context.Context, c *agent.Client) error {
		var p *health.Prober
		if docker, err := proxy.LocalDocker(); err != nil {
			log.Info("application health probes of service applications only: no Docker client", "err", err.Error())
			p = health.New(nil)
		} else {
			defer docker.Close()
			p = health.New(docker)
		}
		p.ServiceSlots(deploy.New(deploy.Options{StateDir: stateDir}).LiveServiceUpstreams)
		t := time.NewTicker(interval)
		defer t.Stop()
		// asks is false once the control plane answered without targets
		// (one older than them): the labelled containers are probed.
		idle, asks := 0, true
		for {
			probes, err := p.Probe(ctx)
			if err != nil {
				// Without the labelled containers (no Docker engine), the
				// control plane still names what to probe.
				log.Debug("application health probes", "err", err.Error())
			}
			_, known := p.Targets()
			switch {
			case len(probes) > 0 || asks && (!known || idle >= idleTargetRounds):
				idle = 0
				targets, err := c.PostHealth(ctx, agentproto.HealthReport{Probes: probes, WantTargets: asks})
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				if targets != nil {
					p.SetTargets(targets.Apps)
				} else if asks {
					asks = false
					log.Info("the control plane does not say which applications to probe: probing the containers labelled with their health path")
				}
			default:
				idle++
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}}
}

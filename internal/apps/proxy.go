package apps

import (
	"context"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// ProxyConfig returns the desired proxy state of a server, every domain of
// its applications that are not being removed, with its revision: jobs
// carry it, and agents apply no state older than one they applied.
func (s *Service) ProxyConfig(ctx context.Context, serverID string) (agentproto.ProxyConfig, error) {
	cfg, err := s.store.ProxyState(ctx, serverID)
	if cfg.Sites == nil {
		cfg.Sites = []agentproto.ProxySite{}
	}
	return cfg, err
}

// addresses are where a answers: its domains, by hostname, then its
// published port.
func (s *Service) addresses(ctx context.Context, a App) ([]Address, error) {
	out := []Address{}
	sites, err := s.store.ProxySites(ctx, a.ServerID)
	if err != nil {
		return nil, err
	}
	for _, site := range sites {
		if site.AppID != a.ID {
			continue
		}
		scheme := "https://"
		if site.TLSMode == agentproto.TLSOff {
			scheme = "http://"
		}
		out = append(out, Address{Kind: AddressDomain, Address: site.Hostname, URL: scheme + site.Hostname + "/"})
	}
	if a.Publish != nil {
		out = append(out, Address{Kind: AddressPort, Address: a.Publish.Address(), URL: portURL(*a.Publish)})
	}
	return out, nil
}

// applyProxy queues proxy.apply with the server's whole desired state,
// when the server has an agent.
func (s *Service) applyProxy(ctx context.Context, c audit.Caller, serverID string) error {
	srv, err := s.servers.Get(ctx, serverID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !srv.HasAgent() {
		return nil
	}
	cfg, err := s.ProxyConfig(ctx, serverID)
	if err != nil {
		return err
	}
	_, _, err = s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: serverID,
		Work: jobs.Of(agentproto.ProxyApply, agentproto.ProxyApplyPayload{Proxy: cfg}), CreatedBy: c.Actor.ID})
	return err
}

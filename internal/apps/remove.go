package apps

import (
	"context"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

func errRemoving() error {
	return fault.Conflictf("application-removing", "The application is being removed.")
}

// Removal is the outcome of a delete request.
type Removal struct {
	ApplicationID string `json:"application_id"`
	// Status is "removing" (the app.remove job was queued) or "deleted"
	// (the server is gone or revoked, so nothing was left to remove).
	Status string    `json:"status" enum:"removing,deleted"`
	Job    *jobs.Job `json:"job" doc:"The app.remove job; null when the application was deleted at once"`
}

// Delete queues the removal of an application's containers and proxy
// sites (app.remove); the application, its deployments and domains are
// deleted when the job succeeds. Queued deployments are cancelled. While a
// deployment runs it is refused (409): wait for it or cancel it first.
// An application whose server is gone or revoked is deleted at once.
func (s *Service) Delete(ctx context.Context, c audit.Caller, id string) (Removal, error) {
	return s.DeleteWith(ctx, c, id, RemoveOptions{})
}

// RemoveOptions are the choices of a removal.
type RemoveOptions struct {
	// Purge removes the named volumes of a compose application with it
	// (they are kept otherwise).
	Purge bool
	// Force succeeds when the server's proxy cannot take its new state,
	// forgetting the application's sites there.
	Force bool
}

// DeleteWith is Delete with the removal's options.
func (s *Service) DeleteWith(ctx context.Context, c audit.Caller, id string, o RemoveOptions) (Removal, error) {
	purge := o.Purge
	if err := s.reconcile(ctx, id); err != nil && !fault.Is(err, fault.NotFound) {
		s.log.WarnContext(ctx, "settling deployments", "app_id", id, "err", err.Error())
	}
	a, err := s.store.App(ctx, id)
	if err != nil {
		return Removal{}, err
	}
	if a.State == StateRemoving {
		return Removal{}, errRemoving()
	}
	if err := s.refuseRunning(ctx, id); err != nil {
		return Removal{}, err
	}
	// What the application has in its server's proxy, before it is left
	// out of the proxy state.
	sites, err := s.store.ProxySites(ctx, a.ServerID)
	if err != nil {
		return Removal{}, err
	}
	var hostnames []string
	for _, site := range sites {
		if site.AppID == id {
			hostnames = append(hostnames, site.Hostname)
		}
	}
	if a.Publish != nil {
		hostnames = append(hostnames, a.Publish.Address())
	}
	prev := a.State
	now := s.now().UTC()
	if err := s.store.SetAppState(ctx, id, []string{StateActive, StateRemovalFailed}, StateRemoving, "", "", now); err != nil {
		return Removal{}, err
	}
	undo := func() {
		if err := s.store.SetAppState(context.WithoutCancel(ctx), id, []string{StateRemoving}, prev, a.RemoveJobID, a.RemoveError, s.now().UTC()); err != nil {
			s.log.ErrorContext(ctx, "restoring the application's state", "app_id", id, "err", err.Error())
		}
	}
	// No deployment starts from now on: cancel the waiting ones, and the
	// dispatched one whose job the agent has not claimed.
	if _, err := s.store.CancelQueuedDeployments(ctx, id, "", now); err != nil {
		undo()
		return Removal{}, err
	}
	running, err := s.store.RunningDeployments(ctx, id)
	if err != nil {
		undo()
		return Removal{}, err
	}
	for _, d := range running {
		if d.JobID != "" && jobs.Status(d.JobStatus) == jobs.Queued {
			if _, err := s.jobs.Cancel(ctx, d.JobID); err != nil && !fault.Is(err, fault.Conflict) {
				undo()
				return Removal{}, err
			}
		}
	}
	if err := s.refuseRunning(ctx, id); err != nil {
		undo()
		return Removal{}, err
	}

	srv, err := s.servers.Get(ctx, a.ServerID)
	if err != nil && !fault.Is(err, fault.NotFound) {
		undo()
		return Removal{}, err
	}
	if err != nil || !srv.HasAgent() {
		// Nothing can be removed on a server without an agent.
		if err := s.deleteApp(ctx, id); err != nil {
			undo()
			return Removal{}, err
		}
		return Removal{ApplicationID: id, Status: "deleted"}, s.audit.Record(ctx, c, ActionDeleted, audit.Target{Type: "application", ID: id}, map[string]any{"name": a.Name, "server_id": a.ServerID, "removed_on_server": false})
	}
	proxy, err := s.ProxyConfig(ctx, a.ServerID) // without this application's: it is removing
	if err != nil {
		undo()
		return Removal{}, err
	}
	j, _, err := s.jobs.Enqueue(ctx, jobs.NewJob{ServerID: a.ServerID, AppID: a.ID, CreatedBy: c.Actor.ID,
		Work: jobs.Of(agentproto.AppRemove, agentproto.RemovePayload{AppID: id, AppName: serviceName(a), Proxy: proxy, PurgeVolumes: purge,
			ProxySites: hostnames, Force: o.Force})})
	if err != nil {
		undo()
		return Removal{}, err
	}
	if err := s.store.SetAppState(ctx, id, []string{StateRemoving}, StateRemoving, j.ID, "", s.now().UTC()); err != nil {
		return Removal{}, err
	}
	return Removal{ApplicationID: id, Status: "removing", Job: &j}, s.audit.Record(ctx, c, ActionDeleted, audit.Target{Type: "application", ID: id}, map[string]any{"name": a.Name, "server_id": a.ServerID, "job_id": j.ID, "purge": purge, "force": o.Force})
}

// refuseRunning is a 409 when a deployment's job of the application is
// running on the agent.
func (s *Service) refuseRunning(ctx context.Context, appID string) error {
	running, err := s.store.RunningDeployments(ctx, appID)
	if err != nil {
		return err
	}
	for _, d := range running {
		if jobs.Status(d.JobStatus) == jobs.Running || (d.JobID == "" && d.Status == Running) {
			return fault.Conflictf("deployment-running", "Deployment %s is running; wait for it to finish before deleting the application.", d.ID)
		}
	}
	return nil
}

// removeFinished is the completion hook of app.remove.
func (s *Service) removeFinished(ctx context.Context, j jobs.Job) error {
	// The hook runs on the agent's request; finish even if it hangs up.
	ctx = context.WithoutCancel(ctx)
	a, err := s.store.AppByRemoveJob(ctx, j.ID)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	now := s.now().UTC()
	switch j.Status {
	case jobs.Succeeded:
		if err := s.deleteApp(ctx, a.ID); err != nil {
			return err
		}
		return s.audit.Record(ctx, audit.System, ActionRemoved, audit.Target{Type: "application", ID: a.ID}, map[string]any{"name": a.Name, "job_id": j.ID})
	case jobs.Cancelled:
		// The removal was called off before the agent took it.
		return s.store.SetAppState(ctx, a.ID, []string{StateRemoving}, StateActive, "", "", now)
	default:
		msg := "removal failed"
		if j.Error != nil {
			msg = *j.Error
		}
		if err := s.store.SetAppState(ctx, a.ID, []string{StateRemoving}, StateRemovalFailed, j.ID, msg, now); err != nil {
			return err
		}
		return s.audit.Record(ctx, audit.System, ActionRemovalFailed, audit.Target{Type: "application", ID: a.ID}, map[string]any{"job_id": j.ID, "error": msg})
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestAgentPartitionedMidJob runs a real agent in a network namespace of
// its own, linked to the control plane (which listens on the link's
// address) by a veth pair, and cuts the link while a job runs: a
// container.stop of a container that ignores its stop signal, so that the
// job lasts until the test kills the container. The job must fail as
// agent_lost once a lease has passed since the agent's last sign of life
// (never stay running), and when the link comes back the agent's result,
// which it kept retrying, is recorded as the job's late result; the job
// stays failed and was started once.
func TestAgentPartitionedMidJob(t *testing.T) {
	t.Parallel()
	ns := testlab.NewNetNS(t)
	docker := testlab.Docker(t)
	image := testlab.ProgramImage(t, docker, testlab.UniqueName("capstan-e2e-chatter:"), "testdata/chatter").Ref
	// The program ends on SIGTERM only; the Go runtime ignores SIGWINCH,
	// so a stop waits for the stop timeout, or for the test's kill.
	stopTimeout := 600
	name := testlab.CreateContainer(t, docker, client.ContainerCreateOptions{
		Name: testlab.UniqueName("capstan-e2e-partition-"),
		Config: &container.Config{Image: image, Cmd: []string{"-interval", "1s"}, StopSignal: "SIGWINCH", StopTimeout: &stopTimeout,
			Labels: map[string]string{"dev.capstan.e2e": "partition"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	testlab.StartContainer(t, docker, name)
	containerState := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := docker.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatalf("inspecting %s: %v", name, err)
		}
		return string(res.Container.State.Status)
	}

	f := newFleet(t, Options{ListenHost: ns.HostAddr.String()})
	e, config := f.enrollServer(t, "partitioned")
	env := testlab.DockerEnv() // a unix socket: reachable from any network namespace
	agent := startAgentIn(t, ns, config, env)
	testlab.Eventually(t, startTimeout, "the agent is online", func() bool {
		if !agent.Running() {
			t.Fatalf("capstan-agent exited:\n%s", agent.Logs())
		}
		return f.server(t, e.Server.ID).Status == "online"
	})

	r := f.action(t, e.Server.ID, map[string]any{"type": agentproto.JobContainerStop, "payload": map[string]any{"container": name}})
	expectStatus(t, r, http.StatusAccepted)
	var a Accepted
	r.JSON(t, &a)
	// The job runs: the agent reported that it is stopping the container
	// (the event also tells the control plane that the agent has the job).
	var stopping time.Time
	testlab.EventuallyReport(t, jobTimeout, "the agent is stopping the container", func() (bool, string) {
		j := f.job(t, a.JobID)
		for _, ev := range j.Events {
			if strings.Contains(ev.Message, "stopping it") {
				stopping = ev.At
			}
		}
		if j.Status != "running" && j.Status != "queued" {
			t.Fatalf("job %s before the cut, want running: %+v", j.Status, j)
		}
		return j.Status == "running" && !stopping.IsZero(), j.Status
	})
	if got := containerState(); got != "running" {
		t.Fatalf("container %s is %s while its stop runs, want running", name, got)
	}

	// The partition; then the job's work ends while the agent is cut off.
	ns.Cut(t)
	cut := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := docker.ContainerKill(ctx, name, client.ContainerKillOptions{Signal: "SIGKILL"})
	cancel()
	if err != nil {
		t.Fatalf("killing %s: %v", name, err)
	}
	testlab.Eventually(t, time.Minute, "the container has exited", func() bool { return containerState() == "exited" })

	// Failed once a lease passed without a sign of life; never stuck.
	var lost JobInfo
	testlab.EventuallyReport(t, 2*time.Minute, "the job fails as agent_lost", func() (bool, string) {
		lost = f.job(t, a.JobID)
		return lost.Status != "running", lost.Status
	})
	t.Logf("job failed %s after the cut", time.Since(cut).Round(time.Second))
	if lost.Status != "failed" || deref(lost.Error) != "agent_lost" || lost.LateResult != nil {
		t.Fatalf("job after the partition: status %s, error %s, late result %+v; want failed, agent_lost, none yet", lost.Status, deref(lost.Error), lost.LateResult)
	}
	if lost.FinishedAt == nil || lost.FinishedAt.Sub(stopping) < 29*time.Second {
		t.Errorf("job failed at %v, less than a 30 s lease after the agent's event at %v", lost.FinishedAt, stopping)
	}

	// The link comes back: the agent's result is recorded late.
	ns.Restore(t)
	var late JobInfo
	testlab.EventuallyReport(t, 2*time.Minute, "the agent's late result is recorded", func() (bool, string) {
		late = f.job(t, a.JobID)
		return late.LateResult != nil, late.Status
	})
	if late.Status != "failed" || deref(late.Error) != "agent_lost" {
		t.Errorf("job after its late result: status %s, error %s; want failed, agent_lost", late.Status, deref(late.Error))
	}
	var data agentproto.ContainerState
	if err := json.Unmarshal(late.LateResult.Data, &data); err != nil {
		t.Fatalf("late result data %s: %v", late.LateResult.Data, err)
	}
	if late.LateResult.Status != "succeeded" || data.Container != name || data.State != "exited" || !late.LateResult.At.After(*lost.FinishedAt) {
		t.Errorf("late result %+v (data %s); want succeeded with container %s exited, after the job failed at %v",
			late.LateResult, late.LateResult.Data, name, lost.FinishedAt)
	}
	testlab.Eventually(t, time.Minute, "the agent heartbeats again", func() bool {
		s := f.server(t, e.Server.ID)
		return s.Status == "online" && s.LastSeenAt != nil && s.LastSeenAt.After(*lost.FinishedAt)
	})
	if n := jobStarts(agent)[a.JobID]; n != 1 {
		t.Errorf("the agent started the job %d times, want once", n)
	}
	if !agent.Running() {
		t.Errorf("the agent exited:\n%s", agent.Logs())
	}
}

import { useEffect, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { EventLine } from "../components/EventLine";
import { Link, useConfirm, type Confirmation, Loading, ProblemBox, StatusBadge, Table } from "../components/ui";
import { imageLabel, shortDigest } from "../lib/jobs";
import { concernsApp, concernsDeployment, deploymentDone, releaseName, rollbackObject } from "../lib/apps";
import { currentUser } from "../lib/auth";
import { duration } from "../lib/format";
import { finished, mergeEvents } from "../lib/jobs";
import { useLive } from "../lib/live";
import { asProblem, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import { navigate } from "../lib/router";
import "./apps.css";
import { Ago } from "../components/Ago";
import { useTitle } from "../lib/title";

type Deployment = Schemas["Deployment"];
type Detail = Schemas["DeploymentDetail"];
type JobEvent = Schemas["Event"];

// DeploymentLive shows a deployment as it runs: its status from the job's
// stream messages, its events (the pull, the build output, the health
// check, the switch) as the stream brings them, and its outcome.
export function DeploymentLive({ id, onEnd, full = false }: { id: string; onEnd?: (d: Detail) => void; full?: boolean }) {
  const res = useResource(() => ok(api.GET("/api/v1/deployments/{id}", { params: { path: { id } } })), [id]);
  const d = res.data;
  useEffect(() => {
    if (d && deploymentDone.includes(d.status)) onEnd?.(d);
  }, [d?.status]);
  useLive(
    ["job", "job.events", "event"],
    (data, type) => {
      if (type === "reset") return void res.reload();
      if (!d) return;
      if (type === "job" && concernsDeployment(data, d)) {
        // The outcome (result, image, error) comes from the deployment.
        if (finished(data.status) || !d.job_id) void res.reload();
        else if (data.status === "running") res.set((cur) => (cur ? { ...cur, status: "running", started_at: data.started_at ?? cur.started_at } : cur));
        return;
      }
      // A member's job messages carry no payload: a deploy job on the
      // server may be this one's, once it is dispatched.
      if (type === "job" && !d.job_id && data?.type === "app.deploy" && data.server_id === d.server_id && !data.payload) void res.reload();
      if (type === "job.events" && d.job_id && data?.job_id === d.job_id) {
        res.set((cur) => (cur ? { ...cur, events: mergeEvents(cur.events ?? [], data.events as JobEvent[]) } : cur));
      }
      if (type === "event" && data?.subject?.id === id) void res.reload();
    },
    [id, d?.job_id],
  );
  if (!d) return res.problem ? <ProblemBox problem={res.problem} /> : <Loading what="the deployment" />;
  const events = d.events ?? [];
  const r = d.result;
  return (
    <div class="deployment" data-deployment={d.id} data-status={d.status}>
      <div class="row wrap">
        <StatusBadge status={d.status} />
        <strong>{releaseName(d)}</strong>
        {d.rollback_of && <span class="muted">rollback to {d.rollback_of}</span>}
        <span class="muted">
          {d.started_at ? <Ago prefix="started " at={d.started_at} /> : <Ago prefix="queued " at={d.created_at} />}
          {d.finished_at && d.started_at ? `, took ${duration(Date.parse(d.finished_at) - Date.parse(d.started_at))}` : ""}
        </span>
        {!full && <Link href={"/deployments/" + d.id}>Open the deployment</Link>}
      </div>
      <ProblemBox problem={res.problem} />
      {d.status === "queued" && !d.job_id && <p class="muted">Waiting for the application's previous deployment to end.</p>}
      {d.error && <p class="lvl-error">{d.error}</p>}
      {d.spec.git && (
        <p class="muted">
          {d.spec.git.repository} {d.spec.git.ref} → <code>{d.spec.git.commit_sha.slice(0, 12)}</code> {d.spec.git.commit_message}{" "}
          {d.spec.git.commit_author && `(${d.spec.git.commit_author})`}
        </p>
      )}
      {full && r && (
        <dl class="facts">
          <dt>Image</dt>
          <dd>
            <code title={d.image_id || r.image_id}>{d.spec.image ? imageLabel(d.spec.image) : shortDigest(d.image_id || r.image_id || "")}</code>
          </dd>
          {r.container_name && (
            <>
              <dt>Container</dt>
              <dd>{r.container_name}</dd>
            </>
          )}
          {r.build && (
            <>
              <dt>Build</dt>
              <dd>
                fetch {duration(r.build.fetch_ms)}, build {duration(r.build.build_ms)}, {r.build.cached_steps} of {r.build.steps} steps
                cached
              </dd>
            </>
          )}
          {r.service && (
            <>
              <dt>Unit</dt>
              <dd>
                {r.service.unit} on port {r.service.port}
              </dd>
            </>
          )}
          {r.services && (
            <>
              <dt>Services</dt>
              <dd>{Object.keys(r.services).join(", ")}</dd>
            </>
          )}
        </dl>
      )}
      {currentUser()?.admin ? (
        <div class="log deploy-log" role="log" aria-label={`Events of deployment ${d.id}`} tabIndex={0}>
          {events.length === 0 && <p class="muted">No events yet.</p>}
          {events.map((e) => (
            <EventLine key={e.seq + e.at} event={e} />
          ))}
        </div>
      ) : (
        <p class="muted">A deployment's events and build output are for administrators.</p>
      )}
    </div>
  );
}

type DeploymentAction = "rollback" | "cancel";

// asked is the confirmation of rolling back to a deployment or cancelling
// it, naming the release.
function asked(d: Deployment, what: DeploymentAction, run: () => unknown): Confirmation {
  return what === "rollback"
    ? { title: "Roll back", action: "Roll back to", object: rollbackObject(d), run }
    : { title: "Cancel the deployment", action: "Cancel", object: `the deployment of ${releaseName(d)}`, run };
}

// DeploymentPage is one deployment: what it deploys, live events, and
// rollback to it or cancelling it while queued.
export function DeploymentPage({ id }: { id: string }) {
  const res = useResource(() => ok(api.GET("/api/v1/deployments/{id}", { params: { path: { id } } })), [id]);
  const d = res.data;
  useTitle(d && `Deployment of ${d.spec.app_name}`, "Applications");
  const [problem, setProblem] = useState<Problem | null>(null);
  const admin = currentUser()?.admin ?? false;
  const confirm = useConfirm((what: DeploymentAction) => asked(d!, what, () => act(what)));
  async function act(what: DeploymentAction) {
    setProblem(null);
    try {
      if (what === "rollback") {
        const a = await ok(api.POST("/api/v1/deployments/{id}/rollback", { params: { path: { id } } }));
        navigate("/deployments/" + a.deployment_id);
      } else {
        await ok(api.POST("/api/v1/deployments/{id}/cancel", { params: { path: { id } } }));
        await res.reload();
      }
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  if (!d) return res.problem ? <ProblemBox problem={res.problem} /> : <Loading what="the deployment" />;
  return (
    <section class="apps">
      <p>
        <Link href={"/applications/" + d.application_id + "/deployments"}>← {d.spec.app_name}'s deployments</Link>
      </p>
      <div class="row wrap">
        <h1>Deployment of {d.spec.app_name}</h1>
        {admin && d.status === "succeeded" && (
          <button type="button" onClick={() => confirm.ask("rollback")}>
            Roll back to this release
          </button>
        )}
        {admin && d.status === "queued" && (
          <button type="button" class="danger" onClick={() => confirm.ask("cancel")}>
            Cancel the deployment
          </button>
        )}
      </div>
      <ProblemBox problem={problem} />
      <div class="card">
        <DeploymentLive id={id} full onEnd={() => void res.reload()} />
      </div>
      <div class="card">
        <h2>What it deploys</h2>
        <dl class="facts">
          <dt>Id</dt>
          <dd>
            <code>{d.id}</code>
          </dd>
          <dt>Image</dt>
          <dd>
            <code>{d.spec.image || "–"}</code>
          </dd>
          {d.spec.pinned_image_id && (
            <>
              <dt>Pinned image</dt>
              <dd>
                <code>{d.spec.pinned_image_id}</code>
              </dd>
            </>
          )}
          <dt>Port</dt>
          <dd>{d.spec.container_port || "–"}</dd>
          <dt>Health path</dt>
          <dd>{d.spec.health_path}</dd>
          <dt>Memory limit</dt>
          <dd>{d.spec.memory_limit || "none"}</dd>
          <dt>Environment</dt>
          <dd>{(d.spec.env_keys ?? []).join(", ") || "none"}</dd>
          {d.spec.compose && (
            <>
              <dt>Web service</dt>
              <dd>{d.spec.compose.web_service}</dd>
            </>
          )}
          {d.spec.service && (
            <>
              <dt>Start command</dt>
              <dd>{d.spec.service.commands_hidden ? <span class="muted">hidden (administrators only)</span> : <code>{d.spec.service.start_command}</code>}</dd>
            </>
          )}
          <dt>Job</dt>
          <dd>{d.job_id ? <Link href={"/jobs/" + d.job_id}>{d.job_id}</Link> : "not yet"}</dd>
        </dl>
        {d.spec.compose?.document_masked && <p class="muted">Environment values, build arguments, labels and commands are masked.</p>}
        {d.spec.compose?.document && <pre class="log">{d.spec.compose.document}</pre>}
      </div>
      {confirm.dialog}
    </section>
  );
}

// DeploymentList is an application's deployments, newest first, with
// rollback to a release that succeeded and cancel of a queued one.
export function DeploymentList({ app, onChange }: { app: Schemas["ApplicationDetail"]; onChange: () => void }) {
  const res = useResource(
    async () => (await ok(api.GET("/api/v1/applications/{id}/deployments", { params: { path: { id: app.id }, query: { limit: 50 } } }))).deployments ?? [],
    [app.id],
  );
  const [problem, setProblem] = useState<Problem | null>(null);
  const confirm = useConfirm(({ d, what }: { d: Deployment; what: DeploymentAction }) => asked(d, what, () => act(d, what)));
  const admin = currentUser()?.admin ?? false;
  useLive(["event", "job"], (data, type) => {
    if (type === "reset" || concernsApp(type, data, app)) void res.reload();
  }, [app.id]);
  async function act(d: Deployment, what: DeploymentAction) {
    setProblem(null);
    try {
      if (what === "rollback") await ok(api.POST("/api/v1/deployments/{id}/rollback", { params: { path: { id: d.id } } }));
      else await ok(api.POST("/api/v1/deployments/{id}/cancel", { params: { path: { id: d.id } } }));
      await res.reload();
      onChange();
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  const list = res.data;
  return (
    <div>
      <ProblemBox problem={problem ?? res.problem} />
      {!list && !res.problem && <Loading what="deployments" />}
      {list && (
        <div class="card scroll-x">
          <Table label="Deployments" columns={["Release", "Status", "Created", "Took", admin && "Actions"]}>
            {list.map((d) => (
              <tr key={d.id} data-deployment={d.id}>
                <td>
                  <Link href={"/deployments/" + d.id}>{releaseName(d)}</Link>
                  {d.id === app.current_deployment_id && <span class="tag">current</span>}
                  {d.rollback_of && <span class="muted"> rollback</span>}
                  {d.error && <div class="lvl-error small">{d.error}</div>}
                </td>
                <td>
                  <StatusBadge status={d.status} />
                </td>
                <td><Ago at={d.created_at} /></td>
                <td>{d.finished_at && d.started_at ? duration(Date.parse(d.finished_at) - Date.parse(d.started_at)) : "–"}</td>
                {admin && (
                  <td>
                    <div class="actions">
                      {d.status === "succeeded" && d.id !== app.current_deployment_id && (
                        <button type="button" aria-label={`Roll back to ${releaseName(d)} (${d.id})`} onClick={() => confirm.ask({ d, what: "rollback" })}>
                          Roll back
                        </button>
                      )}
                      {d.status === "queued" && (
                        <button type="button" class="danger" aria-label={`Cancel deployment ${d.id}`} onClick={() => confirm.ask({ d, what: "cancel" })}>
                          Cancel
                        </button>
                      )}
                    </div>
                  </td>
                )}
              </tr>
            ))}
          </Table>
          {list.length === 0 && <p class="muted">No deployments yet.</p>}
        </div>
      )}
      {confirm.dialog}
    </div>
  );
}

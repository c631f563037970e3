import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../../api/client";
import { CopyButton, Field, Link, ProblemBox, StatusBadge, Table } from "../../components/ui";
import { releaseName, unapplied } from "../../lib/apps";
import { currentUser } from "../../lib/auth";
import { Ago } from "../../components/Ago";
import { useAction } from "../../lib/action";
import { useResource } from "../../lib/resource";
import { sourceText } from "../Apps";
import { DeploymentLive } from "../Deployments";
import { Named } from "../Jobs";

type Detail = Schemas["ApplicationDetail"];

export function Overview({ app, reload }: { app: Detail; reload: () => Promise<void> }) {
  const server = useResource(
    async () => (await ok(api.GET("/api/v1/servers/{id}", { params: { path: { id: app.server_id } } }))).name,
    [app.server_id],
  );
  const admin = currentUser()?.admin ?? false;
  const [ref, setRef] = useState("");
  const { problem, busy, errs, handleSubmit } = useAction();
  // The deployment this page started, shown live until a newer one is
  // the application's latest.
  const [started, setStarted] = useState<string | null>(null);
  const takesRef = !(app.kind === "compose" && app.source.type === "inline");

  const deploy = handleSubmit(async () => {
    const body = takesRef && ref.trim() ? { ref: ref.trim() } : {};
    const a = await ok(api.POST("/api/v1/applications/{id}/deployments", { params: { path: { id: app.id } }, body }));
    setStarted(a.deployment_id);
    setRef("");
    void reload();
  });
  const live = started ?? app.latest?.id ?? null;
  const notApplied = unapplied(app, app.current, app.latest, app.current?.id);
  return (
    <>
      <div class="grid2">
        <div class="card">
          <h2>Application</h2>
          <dl class="facts">
            <dt>Server</dt>
            <dd>
              <Link href={"/servers/" + app.server_id}>
                <Named name={server.data} id={app.server_id} />
              </Link>{" "}
              <CopyButton text={app.server_id} label="Copy id" />
            </dd>
            <dt>Source</dt>
            <dd class="apps-source">{sourceText(app)}</dd>
            {app.kind !== "service" && (
              <>
                <dt>Port</dt>
                <dd>{app.container_port}</dd>
              </>
            )}
            <dt>Health path</dt>
            <dd>{app.health_path}</dd>
            <dt>Memory limit</dt>
            <dd>{app.memory_limit || "none"}</dd>
            <dt>Addresses</dt>
            <dd>
              {(app.addresses ?? []).length === 0 ? (
                "none: add a domain or publish a port"
              ) : (
                <ul class="apps-addresses">
                  {(app.addresses ?? []).map((a) => (
                    <li key={a.kind + a.address}>
                      <a href={a.url} class="mono" target="_blank" rel="noreferrer">
                        {a.address}
                      </a>{" "}
                      <span class="muted">{a.kind === "port" ? "published port" : "domain"}</span>
                    </li>
                  ))}
                </ul>
              )}
            </dd>
            {app.source.type === "git" && (
              <>
                <dt>Auto-deploy</dt>
                <dd>{app.auto_deploy ? "every push to " + app.source.branch : "off"}</dd>
              </>
            )}
            <dt>Current release</dt>
            <dd>
              {app.current ? (
                <>
                  <Link href={"/deployments/" + app.current.id}>
                    <span title={app.current.id}>{releaseName(app.current)}</span>
                  </Link>{" "}
                  <CopyButton text={app.current.id} label="Copy id" />
                </>
              ) : (
                "none yet"
              )}
            </dd>
            {app.remove_error && (
              <>
                <dt>Removal</dt>
                <dd class="lvl-error">{app.remove_error}</dd>
              </>
            )}
          </dl>
          {notApplied.length > 0 && app.latest && (
            <div class="not-applied" role="note" aria-label="Settings not applied">
              <p>
                The latest deployment, <Link href={"/deployments/" + app.latest.id}><span title={app.latest.id}>{releaseName(app.latest)}</span></Link>, failed: the live release
                runs without these settings.
              </p>
              <table class="table" aria-label="Settings the live release runs with">
                <thead>
                  <tr>
                    <th scope="col">Setting</th>
                    <th scope="col">Live release</th>
                    <th scope="col">Set, not applied</th>
                  </tr>
                </thead>
                <tbody>
                  {notApplied.map((u) => (
                    <tr key={u.label} data-setting={u.label}>
                      <td>{u.label}</td>
                      <td class="mono">{u.live}</td>
                      <td class="mono">{u.set}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </div>
        {admin && (
          <form class="card form" aria-label="Deploy" onSubmit={deploy} noValidate>
            <h2>Deploy</h2>
            <ProblemBox problem={problem} fields={["ref"]} />
            {takesRef && (
              <Field label={app.source.type === "git" ? "Branch, tag or commit" : "Image for this deployment"} name="deploy-ref" errors={errs.ref}
                hint={app.source.type === "git" ? `Optional; default the branch ${app.source.branch}.` : "Optional; default the application's image."}>
                <input id="deploy-ref" class="mono" value={ref} onInput={(e) => setRef((e.target as HTMLInputElement).value)} />
              </Field>
            )}
            <div class="row">
              <button type="submit" class="primary" disabled={busy || app.status === "removing"}>
                Deploy now
              </button>
            </div>
          </form>
        )}
      </div>
      {live && (
        <div class="card">
          <h2>{live === app.latest?.id && app.latest?.status !== "running" && app.latest?.status !== "queued" ? "Latest deployment" : "Deploying"}</h2>
          <DeploymentLive key={live} id={live} onEnd={() => void reload()} />
        </div>
      )}
      {app.services && <Parts kind="compose" app={app} />}
      {app.slots && <Parts kind="service" app={app} />}
    </>
  );
}

// Parts shows a compose application's services or a service
// application's release slots, as the server's latest inventory has them.
function Parts({ app, kind }: { app: Detail; kind: "compose" | "service" }) {
  const at = kind === "compose" ? app.services?.collected_at : app.slots?.collected_at;
  return (
    <div class="card scroll-x">
      <h2>{kind === "compose" ? "Services" : "Release slots"}</h2>
      <p class="muted">{at ? <>From the server's inventory of <Ago at={at} />.</> : "The server has sent no inventory yet."}</p>
      {kind === "compose" ? (
        <Table label="Services" columns={["Service", "State", "Status", "Container", "Restarts"]}>
          {(app.services?.services ?? []).map((s) => (
            <tr key={s.service}>
              <td>
                {s.service}
                {s.service === app.web_service && <span class="tag">web</span>}
              </td>
              <td>
                <StatusBadge status={s.state} />
              </td>
              <td>{s.status}</td>
              <td>{s.container}</td>
              <td>{s.restart_count}</td>
            </tr>
          ))}
        </Table>
      ) : (
        <Table label="Release slots" columns={["Port", "State", "Status", "Release", "Unit"]}>
          {(app.slots?.slots ?? []).map((s) => (
            <tr key={s.port}>
              <td>
                {s.port}
                {s.live && <span class="tag">live</span>}
              </td>
              <td>
                <StatusBadge status={s.state} />
              </td>
              <td>{s.status}</td>
              <td>
                <Link href={"/deployments/" + s.release}>{s.release}</Link>
              </td>
              <td>{s.unit}</td>
            </tr>
          ))}
        </Table>
      )}
    </div>
  );
}

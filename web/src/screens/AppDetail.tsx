import { useEffect, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { CopyButton, Field, Link, Loading, ProblemBox, StatusBadge, SubNav, Table, useConfirm } from "../components/ui";
import {
  concernsApp,
  releaseName,
  envChange,
  envFieldErrors,
  envRows,
  patchBody,
  settingsForm,
  unapplied,
  type EnvRow,
  type SettingsForm,
} from "../lib/apps";
import { currentUser } from "../lib/auth";
import { Ago } from "../components/Ago";
import { LogFilter } from "../components/LogFilter";
import { filterLines } from "../lib/logs";
import { useLive } from "../lib/live";
import { useAction } from "../lib/action";
import { asProblem, fieldErrors, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import { navigate } from "../lib/router";
import { AppDomains, AppTraffic } from "./AppDomains";
import { sourceText } from "./Apps";
import { DeploymentList, DeploymentLive } from "./Deployments";
import { useJobEnd } from "../lib/useJob";
import { Named } from "./Jobs";
import "./apps.css";
import { useTitle } from "../lib/title";

type Detail = Schemas["ApplicationDetail"];

const tabs = [
  { id: "", label: "Overview" },
  { id: "deployments", label: "Deployments" },
  { id: "env", label: "Environment" },
  { id: "logs", label: "Logs", admin: true },
  { id: "domains", label: "Domains" },
  { id: "traffic", label: "Traffic" },
  { id: "settings", label: "Settings", admin: true },
];

// AppDetail is one application: its status and live deployment, its
// deployments, environment, logs, domains, traffic and settings, each
// section at its own address (/applications/ID/deployments…).
export function AppDetail({ id, tab = "" }: { id: string; tab?: string }) {
  const res = useResource(() => ok(api.GET("/api/v1/applications/{id}", { params: { path: { id }, query: { reveal: false } } })), [id]);
  const app = res.data;
  const admin = currentUser()?.admin ?? false;
  useTitle(tabs.find((t) => t.id && t.id === tab)?.label, app?.name, "Applications");
  useLive(
    ["event", "job"],
    (data, type) => {
      if (type === "reset") return void res.reload();
      if (app && concernsApp(type, data, app) && (type === "event" || data.status !== "running")) void res.reload();
    },
    [app?.id, app?.server_id],
  );
  if (!app) return res.problem ? <ProblemBox problem={res.problem} /> : <Loading what="the application" />;
  const shown = tabs.filter((t) => !t.admin || admin);
  const current = shown.some((t) => t.id === tab) ? tab : "";
  return (
    <section class="apps">
      <p>
        <Link href="/applications">← Applications</Link>
      </p>
      <div class="row wrap">
        <h1>{app.name}</h1>
        <StatusBadge status={app.status} />
        <span class="tag">{app.kind}</span>
        <span class="muted apps-source">{sourceText(app)}</span>
      </div>
      <ProblemBox problem={res.problem} />
      <SubNav label="Application sections"
        items={shown.map((t) => ({ href: `/applications/${id}${t.id ? "/" + t.id : ""}`, label: t.label, current: t.id === current }))} />
      {current === "" && <Overview app={app} reload={res.reload} />}
      {current === "deployments" && <DeploymentList app={app} onChange={() => void res.reload()} />}
      {current === "env" && <EnvEditor app={app} onSaved={(d) => res.set(() => d)} />}
      {current === "logs" && <AppLogs app={app} />}
      {current === "domains" && <AppDomains app={app} />}
      {current === "traffic" && <AppTraffic app={app} />}
      {current === "settings" && <Settings app={app} onSaved={(d) => res.set(() => d)} />}
    </section>
  );
}

function Overview({ app, reload }: { app: Detail; reload: () => Promise<void> }) {
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

// EnvEditor changes the environment without reading its values: they are
// write-only. It lists the names; a value can be replaced, a variable
// removed or added; the change is saved at once, for the next deployment.
function EnvEditor({ app, onSaved }: { app: Detail; onSaved: (d: Detail) => void }) {
  const admin = currentUser()?.admin ?? false;
  const keys = (app.env ?? []).map((e) => e.key);
  const [rows, setRows] = useState<EnvRow[]>(() => envRows(keys));
  const { problem, busy, run } = useAction();
  const [sent, setSent] = useState<ReturnType<typeof envChange>>(null);
  const [saved, setSaved] = useState(false);
  const rowErrs = envFieldErrors(problem?.errors, sent);
  const change = envChange(rows);
  const set = (i: number, part: Partial<EnvRow>) => {
    setSaved(false);
    setRows((cur) => cur.map((r, j) => (j === i ? { ...r, ...part } : r)));
  };

  async function save(e: Event) {
    e.preventDefault();
    if (!change) return;
    await run(async () => {
      setSent(change);
      const d = await ok(api.PATCH("/api/v1/applications/{id}/env", { params: { path: { id: app.id } }, body: change }));
      setRows(envRows((d.env ?? []).map((x) => x.key)));
      setSaved(true);
      onSaved(d);
    });
  }

  if (!admin) {
    return (
      <div class="card">
        <h2>Environment</h2>
        <p class="muted">Values are stored encrypted; administrators set them.</p>
        <ul class="envkeys">
          {keys.map((k) => (
            <li key={k}>
              <code>{k}</code> <span class="muted">= ••••••</span>
            </li>
          ))}
        </ul>
        {keys.length === 0 && <p class="muted">No variables.</p>}
      </div>
    );
  }
  return (
    <form class="card form env-editor" aria-label="Environment" onSubmit={save} noValidate>
      <h2>Environment</h2>
      <p class="muted">
        Values are write-only: stored encrypted and never shown. Set a new value to replace one. Changes apply to the next deployment.
      </p>
      <ProblemBox problem={problem} fields={["set", "remove"]} />
      {rowErrs[""] && <p class="field-error" role="alert">{rowErrs[""].join("; ")}</p>}
      <div class="scroll-x">
        <Table label="Variables" columns={["Name", "Value", "Actions"]}>
          {rows.map((r, i) => {
            const name = r.key || `new variable ${i + 1}`;
            const err = rowErrs[r.key.trim()];
            return (
              <tr key={i} data-env={r.key} class={r.remove ? "removed" : ""}>
                <td>
                  {r.existing ? (
                    <code>{r.key}</code>
                  ) : (
                    <input class="mono" aria-label={`Name of ${name}`} placeholder="NAME" value={r.key} aria-invalid={err ? true : undefined}
                      onInput={(e) => set(i, { key: (e.target as HTMLInputElement).value })} />
                  )}
                  {err && (
                    <small class="field-error" role="alert">
                      {err.join("; ")}
                    </small>
                  )}
                </td>
                <td>
                  {r.remove ? (
                    <span class="muted">{r.existing ? "removed on save" : "dropped"}</span>
                  ) : r.value === null ? (
                    <span class="muted">•••••• (set)</span>
                  ) : (
                    <input type="password" autocomplete="new-password" aria-label={`New value of ${name}`} value={r.value}
                      onInput={(e) => set(i, { value: (e.target as HTMLInputElement).value })} />
                  )}
                </td>
                <td>
                  <div class="actions">
                    {r.existing && !r.remove && r.value === null && (
                      <button type="button" aria-label={`Replace value of ${r.key}`} onClick={() => set(i, { value: "" })}>
                        Replace value
                      </button>
                    )}
                    {r.existing && !r.remove && r.value !== null && (
                      <button type="button" aria-label={`Keep value of ${r.key}`} onClick={() => set(i, { value: null })}>
                        Keep value
                      </button>
                    )}
                    {r.remove ? (
                      <button type="button" aria-label={`Undo removing ${name}`} onClick={() => set(i, { remove: false })}>
                        Undo
                      </button>
                    ) : (
                      <button type="button" class="danger" aria-label={`Remove ${name}`} onClick={() => set(i, { remove: true })}>
                        Remove
                      </button>
                    )}
                  </div>
                </td>
              </tr>
            );
          })}
        </Table>
      </div>
      {rows.length === 0 && <p class="muted">No variables.</p>}
      <div class="row wrap">
        <button type="button" onClick={() => setRows((cur) => [...cur, { key: "", existing: false, value: "", remove: false }])}>
          Add a variable
        </button>
        <button type="submit" class="primary" disabled={busy || !change}>
          Save the environment
        </button>
        {saved && (
          <span role="status" class="ok-text">
            Saved: the next deployment gets it.
          </span>
        )}
      </div>
    </form>
  );
}

// AppLogs reads the live container's (or the live slot's) log through a
// log-read job whose end the stream reports.
function AppLogs({ app }: { app: Detail }) {
  const [lines, setLines] = useState("200");
  const [since, setSince] = useState("");
  const [service, setService] = useState(app.web_service ?? "");
  const [job, setJob] = useState<Schemas["Job"] | null>(null);
  const [read, setRead] = useState<Schemas["AppLogs"] | null>(null);
  const [problem, setProblem] = useState<Problem | null>(null);
  const errs = fieldErrors(problem);
  const [text, setText] = useState("");
  const [priority, setPriority] = useState("");
  // The last lines are read as soon as the tab opens.
  useEffect(() => void start(), []);
  useJobEnd(job, () => {
    if (!job) return;
    void ok(api.GET("/api/v1/applications/{id}/logs/{job_id}", { params: { path: { id: app.id, job_id: job.id } } }))
      .then(setRead)
      .catch((err) => setProblem(asProblem(err)));
  });
  async function start(e?: Event) {
    e?.preventDefault();
    setProblem(null);
    setRead(null);
    try {
      const body: Schemas["AppLogsInputBody"] = { lines: Number(lines) || undefined };
      if (since) body.since = new Date(since).toISOString();
      if (app.kind === "compose" && service) body.service = service;
      const a = await ok(api.POST("/api/v1/applications/{id}/logs", { params: { path: { id: app.id } }, body }));
      setJob(a.job);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  const reading = job && !read && !problem;
  return (
    <div class="card">
      <form class="row wrap logs-form" aria-label="Read the log" onSubmit={start} noValidate>
        {app.kind === "compose" && (
          <Field label="Service" name="log-service" errors={errs.service}>
            <select id="log-service" value={service} onChange={(e) => setService((e.target as HTMLSelectElement).value)}>
              {(app.services?.services ?? []).map((s) => (
                <option key={s.service} value={s.service}>
                  {s.service}
                </option>
              ))}
              {!(app.services?.services ?? []).length && <option value={service}>{service}</option>}
            </select>
          </Field>
        )}
        <Field label="Lines" name="log-lines" errors={errs.lines}>
          <input id="log-lines" inputMode="numeric" value={lines} onInput={(e) => setLines((e.target as HTMLInputElement).value)} />
        </Field>
        <Field label="Since" name="log-since" errors={errs.since}>
          <input id="log-since" type="datetime-local" value={since} onInput={(e) => setSince((e.target as HTMLInputElement).value)} />
        </Field>
        <button type="submit" class="primary" disabled={!!reading}>
          Read the log
        </button>
      </form>
      <ProblemBox problem={problem} fields={["lines", "since", "service"]} />
      {reading && (
        <p class="muted" aria-live="polite">
          <span class="spinner" aria-hidden="true" /> Reading on the server…
        </p>
      )}
      {read && (
        <>
          {read.error && <p class="lvl-error">{read.error}</p>}
          <p class="muted">
            {read.unit ? `Unit ${read.unit}` : "Container"} {read.state && `is ${read.state}`}
            {read.started_at && <>, started <Ago at={read.started_at} /></>}
            {read.restart_count ? `, restarted ${read.restart_count} times` : ""}
          </p>
          <div class="row wrap">
            <LogFilter text={text} priority={priority} onText={setText} onPriority={setPriority} />
          </div>
          <pre class="log" aria-label="Log lines" tabIndex={0}>
            {(read.lines ?? []).length === 0
              ? "No lines."
              : filterLines(read.lines ?? [], text, priority === "" ? null : Number(priority))
                  .map((l) => `${new Date(l.at).toLocaleTimeString()} ${l.stream === "stderr" ? "! " : ""}${l.message}`)
                  .join("\n") || "No line matches the filter."}
          </pre>
          {(read.slots ?? []).length > 0 && (
            <p class="muted">
              Slots:{" "}
              {(read.slots ?? []).map((s) => `${s.unit} ${s.active_state} (${s.sub_state})${s.live ? ", live" : ""}`).join("; ")}
            </p>
          )}
        </>
      )}
    </div>
  );
}

// Settings edits the application as written. The other sections read it
// with the compose document masked and a service's commands hidden, so
// when it has either, the form reads the application once more, revealed
// (a read the audit log records).
function Settings({ app, onSaved }: { app: Detail; onSaved: (d: Detail) => void }) {
  const hidden = !!app.compose_masked || !!app.service?.commands_hidden;
  const full = useResource(
    () => (hidden ? ok(api.GET("/api/v1/applications/{id}", { params: { path: { id: app.id }, query: { reveal: true } } })) : Promise.resolve(app)),
    [app.id],
  );
  if (!full.data) return full.problem ? <ProblemBox problem={full.problem} /> : <Loading what="the settings" />;
  return (
    <SettingsEditor
      app={full.data}
      onSaved={(d, f) => {
        // The reply is masked as well: what was saved is what the form holds.
        full.set(() => ({
          ...d,
          compose: d.compose_masked ? f.compose : d.compose,
          compose_masked: false,
          service: d.service && { ...d.service, start_command: f.start_command.trim(), build_command: f.build_command.trim(), commands_hidden: false },
        }));
        onSaved(d);
      }}
    />
  );
}

// SettingsEditor changes the application for its next deployment, and
// deletes it.
function SettingsEditor({ app, onSaved }: { app: Detail; onSaved: (d: Detail, f: SettingsForm) => void }) {
  const [f, setF] = useState<SettingsForm>(() => settingsForm(app));
  const [problem, setProblem] = useState<Problem | null>(null);
  const [saved, setSaved] = useState(false);
  const [purge, setPurge] = useState(false);
  const confirm = useConfirm(() => ({ title: "Delete the application", action: "Delete", object: app.name + (purge ? " and its volumes" : ""), run: remove }));
  const errs = fieldErrors(problem);
  const body = patchBody(app, f);
  const input = (name: keyof SettingsForm) => ({
    id: "set-" + name,
    value: String(f[name]),
    "aria-invalid": errs[name] ? true : undefined,
    onInput: (e: Event) => {
      setSaved(false);
      setF((cur) => ({ ...cur, [name]: (e.target as HTMLInputElement).value }));
    },
  });
  const field = (label: string, name: keyof SettingsForm, hint?: string, mono = false) => (
    <Field label={label} name={"set-" + name} errors={errs[name === "branch" ? "source" : name]} hint={hint}>
      <input {...input(name)} class={mono ? "mono" : undefined} />
    </Field>
  );
  async function save(e: Event) {
    e.preventDefault();
    if (!body) return;
    setProblem(null);
    try {
      const d = await ok(api.PATCH("/api/v1/applications/{id}", { params: { path: { id: app.id } }, body: body as Schemas["PatchAppInputBody"] }));
      setSaved(true);
      onSaved(d, f);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  async function remove() {
    setProblem(null);
    try {
      await ok(api.DELETE("/api/v1/applications/{id}", { params: { path: { id: app.id }, query: { purge } } }));
      navigate("/applications");
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  return (
    <>
      <form class="card form" aria-label="Settings" onSubmit={save} noValidate>
        <h2>Settings</h2>
        <p class="muted">Changes apply to the next deployment; the running release is untouched.</p>
        <ProblemBox problem={problem} fields={Object.keys(f).concat(["source", "image"])} />
        {app.kind !== "service" && field("Name", "name", "Lowercase letters, digits and dashes.")}
        {app.source.type === "image" && field("Image", "image", "A Docker reference.", true)}
        {app.source.type === "git" && field("Branch", "branch", "Deployed by default and on pushes.", true)}
        {app.kind === "compose" && app.source.type === "inline" && (
          <Field label="Compose document" name="set-compose" errors={errs.compose}>
            <textarea {...input("compose")} rows={10} class="mono" spellcheck={false} />
          </Field>
        )}
        {app.kind === "compose" && app.source.type === "git" && field("Compose file", "compose_file", "Empty for the default.", true)}
        {app.kind === "compose" && field("Web service", "web_service")}
        {app.kind === "container" && app.source.type === "git" && field("Dockerfile", "dockerfile", undefined, true)}
        {app.kind === "container" && app.source.type === "git" && field("Build context", "build_context", undefined, true)}
        {app.kind === "service" && field("Start command", "start_command", "The program listens on 127.0.0.1:$PORT.", true)}
        {app.kind === "service" && field("Build command", "build_command", undefined, true)}
        {app.kind === "service" && field("Build time limit (seconds)", "build_timeout_seconds", "1 to 7200.")}
        {app.kind !== "service" && field("Container port", "container_port")}
        {field("Health path", "health_path", undefined, true)}
        {field("Memory limit", "memory_limit", "e.g. 512m; empty for none.")}
        {field("Published port", "publish", "e.g. 8081 (on 127.0.0.1) or 0.0.0.0:8081; empty for none. Applied to the running release at once.", true)}
        {app.source.type === "git" && (
          <label class="check">
            <input type="checkbox" checked={f.auto_deploy} onChange={(e) => setF((cur) => ({ ...cur, auto_deploy: (e.target as HTMLInputElement).checked }))} />{" "}
            Deploy every push to the branch
          </label>
        )}
        <div class="row wrap">
          <button type="submit" class="primary" disabled={!body}>
            Save the settings
          </button>
          {saved && (
            <span role="status" class="ok-text">
              Saved: the next deployment uses them.
            </span>
          )}
        </div>
      </form>
      <div class="card danger-zone">
        <h2>Delete</h2>
        <p class="muted">Removes the application's containers, its domains and its deployments from the server.</p>
        {app.kind === "compose" && (
          <label class="check">
            <input type="checkbox" checked={purge} onChange={(e) => setPurge((e.target as HTMLInputElement).checked)} /> Also remove its named volumes
            and their data
          </label>
        )}
        <button type="button" class="danger" onClick={() => confirm.ask(null)}>
          Delete {app.name}
        </button>
      </div>
      {confirm.dialog}
    </>
  );
}

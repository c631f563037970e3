import { useMemo, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { Chart } from "../components/Chart";
import { BackLink, type Confirmation, CopyButton, Field, Link, Loading, ProblemBox, StatusBadge, Table, Tabs, useConfirm } from "../components/ui";
import { currentUser } from "../lib/auth";
import { finished } from "../lib/db";
import { bytes } from "../lib/format";
import { useLive } from "../lib/live";
import { asProblem, fieldErrors, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import { navigate } from "../lib/router";
import { Attach } from "./db/Attach";
import { Explore } from "./db/Explore";
import { JobLines } from "./db/JobLines";
import { Keys } from "./db/Keys";
import { Logins } from "./db/Logins";
import { Query } from "./db/Query";
import { useFollowed, type Instance } from "./db/run";
import { Transfer } from "./db/Transfer";
import "./databases.css";
import { Ago } from "../components/Ago";
import { selectTab, tabOf } from "../lib/router";
import { useTitle } from "../lib/title";

type Tab = "overview" | "query" | "explore" | "keys" | "logins" | "transfer" | "attach";
const tabNames: Record<Tab, string> = {
  overview: "Overview",
  query: "Query",
  explore: "Explore",
  keys: "Keys",
  logins: "Logins",
  transfer: "Export and import",
  attach: "Attach",
};

// DatabaseDetail is one instance: its state, figures and connection
// details, and for administrators the query console, explorer, key
// browser, logins, export and import, and attaching an application.
export function DatabaseDetail({ id, tab: wanted }: { id: string; tab?: string }) {
  const res = useResource(() => ok(api.GET("/api/v1/databases/{id}", { params: { path: { id } } })), [id]);
  const inst = res.data;
  const admin = currentUser()?.admin ?? false;
  const setTab = selectTab("/databases/" + id, "overview");
  useTitle(wanted && wanted in tabNames && wanted !== "overview" && tabNames[wanted as Tab], inst?.name, "Databases");
  // The instance's state changes when a job of its server ends. Until the
  // instance is loaded its server is not known, and any database job that
  // ends reloads it: the load under way may have read it before the job
  // ended.
  useLive(
    ["job"],
    (data, type) => {
      if (type === "reset") return void res.reload();
      if (String(data?.type ?? "").startsWith("db.") && (!inst || data?.server_id === inst.server_id) && finished(data.status))
        void res.reload();
    },
    [inst?.server_id],
  );

  if (!inst) return res.problem ? <ProblemBox problem={res.problem} /> : <Loading what="the instance" />;
  const ready = inst.state === "ready";
  const tabs: Tab[] = [
    "overview",
    ...(admin && inst.kind === "sql" ? (["query", "explore"] as Tab[]) : []),
    ...(admin && inst.kind === "kv" ? (["keys"] as Tab[]) : []),
    "logins",
    ...(admin && inst.kind === "sql" ? (["transfer"] as Tab[]) : []),
    ...(admin ? (["attach"] as Tab[]) : []),
  ];
  const tab = tabOf(wanted, tabs);
  return (
    <section class="db">
      <BackLink href="/databases" label="Databases" />
      <div class="row wrap">
        <h1>{inst.name}</h1>
        <StatusBadge status={inst.state} />
        <span class="tag">
          {inst.engine} {inst.version}
        </span>
        <span class="tag">{inst.managed ? "managed" : "external"}</span>
      </div>
      <ProblemBox problem={res.problem} />
      {!ready && tab !== "overview" && tab !== "logins" && (
        <p class="problem" role="status">
          The instance is {inst.state}: it takes queries and calls once it is ready.
        </p>
      )}
      <Tabs label="Instance sections" tabs={tabs.map((t) => ({ id: t, label: tabNames[t] }))} current={tab} onSelect={setTab} />
      {tab === "overview" && <Overview inst={inst} admin={admin} reload={res.reload} />}
      {tab === "query" && <Query inst={inst} />}
      {tab === "explore" && <Explore inst={inst} />}
      {tab === "keys" && <Keys inst={inst} />}
      {tab === "logins" && <Logins inst={inst} admin={admin} reload={res.reload} />}
      {tab === "transfer" && <Transfer inst={inst} />}
      {tab === "attach" && <Attach inst={inst} reload={res.reload} />}
    </section>
  );
}

function Overview({ inst, admin, reload }: { inst: Instance; admin: boolean; reload: () => Promise<void> }) {
  const m = inst.last_metrics;
  const { jobs, follow } = useFollowed();
  const [problem, setProblem] = useState<Problem | null>(null);
  const [purge, setPurge] = useState(false);
  const confirm = useConfirm((what: "stop" | "restart" | "delete"): Confirmation => {
    if (what !== "delete")
      return { title: `${what === "stop" ? "Stop" : "Restart"} an instance`, action: what === "stop" ? "Stop" : "Restart", object: inst.name,
        run: () => control(what) };
    return {
      title: inst.managed ? "Remove a managed instance" : "Forget an external instance",
      action: inst.managed ? "Remove" : "Forget",
      object: inst.name,
      run: remove,
      children: inst.managed ? (
        <label class="choice">
          <input type="checkbox" checked={purge} onChange={(e) => setPurge((e.currentTarget as HTMLInputElement).checked)} /> Also delete its
          data volume (otherwise it is kept)
        </label>
      ) : (
        <p class="muted">The registration and its stored logins go; the database server and its data are not touched.</p>
      ),
    };
  });
  const server = useResource(() => ok(api.GET("/api/v1/servers/{id}", { params: { path: { id: inst.server_id } } })), [inst.server_id]);

  async function control(action: "start" | "stop" | "restart") {
    setProblem(null);
    try {
      const a = await ok(api.POST("/api/v1/databases/{id}/control", { params: { path: { id: inst.id } }, body: { action } }));
      follow(a.job, `${action} ${inst.name}`);
      await reload();
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  async function remove() {
    setProblem(null);
    try {
      const r = await ok(api.DELETE("/api/v1/databases/{id}", { params: { path: { id: inst.id }, query: inst.managed ? { purge } : {} } }));
      if (!inst.managed) navigate("/databases");
      else {
        if (r.job_id) follow({ id: r.job_id, type: "db.remove", status: "queued", error: null } as Schemas["Job"], `remove ${inst.name}`);
        await reload();
      }
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  return (
    <>
      <ProblemBox problem={problem} />
      <JobLines jobs={jobs} />
      <div class="grid2">
        <div class="card">
          <h2>Instance</h2>
          <dl class="facts">
            <dt>Engine</dt>
            <dd>
              {inst.engine} {inst.server_version || inst.version}
            </dd>
            <dt>Address</dt>
            <dd>
              <code>
                {inst.host}:{inst.port}
              </code>{" "}
              <span class="muted">from the server</span>
            </dd>
            {inst.kind === "sql" && (
              <>
                <dt>Database</dt>
                <dd>{inst.database}</dd>
              </>
            )}
            <dt>TLS</dt>
            <dd>{inst.tls_mode}</dd>
            <dt>Server</dt>
            <dd>
              <Link href={"/servers/" + inst.server_id}>{server.data?.name ?? inst.server_id}</Link>
            </dd>
            <dt>Logins</dt>
            <dd>{(inst.logins ?? []).map((l) => l.username).join(", ") || "–"}</dd>
            <dt>Created</dt>
            <dd>{new Date(inst.created_at).toLocaleString()}</dd>
            {inst.last_error && (
              <>
                <dt>Last error</dt>
                <dd class="lvl-error">{inst.last_error}</dd>
              </>
            )}
          </dl>
        </div>
        <div class="card">
          <h2>Now</h2>
          {m ? (
            m.failed ? (
              <p class="lvl-error">The last sample failed{m.error ? `: ${m.error}` : "."}</p>
            ) : (
              <dl class="facts">
                <dt>Connections</dt>
                <dd>
                  {m.connections ?? "–"}
                  {m.max_connections != null ? ` of ${m.max_connections}` : ""}
                </dd>
                {inst.kind === "sql" ? (
                  <>
                    <dt>Size</dt>
                    <dd>{bytes(m.size_bytes)}</dd>
                  </>
                ) : (
                  <>
                    <dt>Keys</dt>
                    <dd>{m.keys ?? "–"}</dd>
                  </>
                )}
                <dt>Memory</dt>
                <dd>{bytes(m.memory_bytes)}</dd>
                <dt>Operations</dt>
                <dd>{m.ops_per_second != null ? `${m.ops_per_second.toFixed(1)}/s` : "–"}</dd>
                <dt>Sampled</dt>
                <dd><Ago at={m.at} /></dd>
              </dl>
            )
          ) : (
            <p class="muted">No sample yet: the agent samples a ready instance every minute.</p>
          )}
        </div>
      </div>
      {admin && (
        <div class="card">
          <h2>Manage</h2>
          <div class="row wrap">
            {inst.managed && (
              <>
                <button type="button" onClick={() => void control("start")} disabled={inst.state !== "stopped" && inst.state !== "failed"}>
                  Start
                </button>
                <button type="button" class="danger" onClick={() => confirm.ask("stop")} disabled={inst.state !== "ready"}>
                  Stop
                </button>
                <button type="button" class="danger" onClick={() => confirm.ask("restart")} disabled={inst.state !== "ready"}>
                  Restart
                </button>
              </>
            )}
            <button type="button" class="danger" onClick={() => confirm.ask("delete")}>
              {inst.managed ? "Remove the instance" : "Forget the instance"}
            </button>
          </div>
          {!inst.managed && <TLSForm inst={inst} onQueued={(j) => (follow(j, `test ${inst.name}`), void reload())} />}
        </div>
      )}
      {admin && <ConnectionDetails inst={inst} />}
      <Metrics inst={inst} />
      {confirm.dialog}
    </>
  );
}

// TLSForm stores an external instance's TLS mode and tests it again.
function TLSForm({ inst, onQueued }: { inst: Instance; onQueued: (j: Schemas["Job"]) => void }) {
  const [problem, setProblem] = useState<Problem | null>(null);
  const errs = fieldErrors(problem);
  async function submit(e: Event) {
    e.preventDefault();
    const f = new FormData(e.currentTarget as HTMLFormElement);
    setProblem(null);
    try {
      const a = await ok(
        api.PUT("/api/v1/databases/{id}/tls", {
          params: { path: { id: inst.id } },
          body: { tls_mode: String(f.get("tls_mode")), ca: String(f.get("ca") ?? "").trim() || undefined },
        }),
      );
      onQueued(a.job);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  return (
    <form class="form" onSubmit={submit} aria-label="TLS and connection test" noValidate>
      <h3>TLS and connection test</h3>
      <ProblemBox problem={problem} fields={["tls_mode", "ca"]} />
      <Field label="TLS mode" name="tls-mode" errors={errs.tls_mode}>
        <select id="tls-mode" name="tls_mode" value={inst.tls_mode}>
          {["verify-full", "verify-ca", "require", "disable"].map((m) => (
            <option key={m}>{m}</option>
          ))}
        </select>
      </Field>
      <Field label="CA certificate (PEM)" name="tls-ca" errors={errs.ca} hint="Leave empty to keep none.">
        <textarea id="tls-ca" name="ca" rows={2} />
      </Field>
      <div>
        <button type="submit">Save and test the connection</button>
      </div>
    </form>
  );
}

// ConnectionDetails reads the logins' passwords and URLs only when asked:
// each read is recorded in the audit log.
function ConnectionDetails({ inst }: { inst: Instance }) {
  const [conn, setConn] = useState<Schemas["Connection"] | null>(null);
  const [problem, setProblem] = useState<Problem | null>(null);
  async function show() {
    setProblem(null);
    try {
      setConn(await ok(api.GET("/api/v1/databases/{id}/connection", { params: { path: { id: inst.id } } })));
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  return (
    <div class="card">
      <div class="row wrap between">
        <h2>Connection details</h2>
        {conn ? (
          <button type="button" onClick={() => setConn(null)}>
            Hide the connection details
          </button>
        ) : (
          <button type="button" onClick={() => void show()}>
            Show the connection details
          </button>
        )}
      </div>
      <p class="muted">Showing them records who read them in the audit log.</p>
      <ProblemBox problem={problem} />
      {conn && (
        <div class="scroll-x">
          <Table label="Logins with passwords" columns={["Login", "Access", "Password", "URL"]}>
            {(conn.logins ?? []).map((l) => (
              <tr key={l.credential_id}>
                <td>{l.username}</td>
                <td>{l.access}</td>
                <td>
                  <code class="secret">{l.password}</code> <CopyButton text={l.password} label={`Copy the password of ${l.username}`} />
                </td>
                <td>
                  <code class="secret">{l.url}</code> <CopyButton text={l.url} label={`Copy the URL of ${l.username}`} />
                  {l.app_url && (
                    <div>
                      <span class="muted">From an application: </span>
                      <code class="secret">{l.app_url}</code>
                    </div>
                  )}
                </td>
              </tr>
            ))}
          </Table>
        </div>
      )}
    </div>
  );
}

const hourChoices = [
  [1, "1 h"],
  [24, "24 h"],
  [168, "7 d"],
  [720, "30 d"],
  [2160, "90 d"],
] as const;

function Metrics({ inst }: { inst: Instance }) {
  const [hours, setHours] = useState<number>(24);
  const { data, problem } = useResource(
    () => ok(api.GET("/api/v1/databases/{id}/metrics", { params: { path: { id: inst.id }, query: { hours } } })),
    [inst.id, hours],
  );
  const charts = useMemo(() => {
    const pts = data?.series ?? [];
    return {
      t: pts.map((p) => Date.parse(p.t) / 1000),
      conn: [
        { label: "Connections", values: pts.map((p) => p.connections) },
        { label: "Limit", values: pts.map((p) => p.max_connections) },
      ],
      size: [{ label: inst.kind === "kv" ? "Keys" : "Size", values: pts.map((p) => (inst.kind === "kv" ? p.keys : p.size_bytes)) }],
      mem: [{ label: "Memory", values: pts.map((p) => p.memory_bytes) }],
      ops: [{ label: "Operations", values: pts.map((p) => p.ops_per_second) }],
      errors: pts.reduce((n, p) => n + p.errors, 0),
    };
  }, [data]);
  return (
    <div>
      <div class="row wrap between">
        <h2>Metrics</h2>
        <div class="row wrap" role="group" aria-label="Range">
          {hourChoices.map(([h, label]) => (
            <button key={h} type="button" aria-pressed={h === hours} class={h === hours ? "primary" : ""} onClick={() => setHours(h)}>
              {label}
            </button>
          ))}
        </div>
      </div>
      <ProblemBox problem={problem} />
      {data && charts.t.length === 0 && <p class="muted">No samples in this range.</p>}
      {data && charts.errors > 0 && <p class="lvl-warn">{charts.errors} samples in this range could not be taken.</p>}
      {data && charts.t.length > 0 && (
        <div class="charts">
          {(
            [
              ["Connections", "count", charts.conn],
              [inst.kind === "kv" ? "Keys" : "Size", inst.kind === "kv" ? "count" : "bytes", charts.size],
              ["Memory", "bytes", charts.mem],
              ["Operations", "perSecond", charts.ops],
            ] as const
          )
            // A figure the engine does not report (an external instance's
            // memory) has no chart.
            .filter(([, , series]) => series.some((s) => s.values.some((v) => v != null)))
            .map(([title, kind, series]) => (
              <Chart key={title} title={title} kind={kind} times={charts.t} series={series} />
            ))}
        </div>
      )}
    </div>
  );
}

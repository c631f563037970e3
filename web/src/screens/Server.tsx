import { useMemo, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { Chart } from "../components/Chart";
import { Logs } from "./Logs";
import { ServerContainers } from "./ServerContainers";
import { ServerWorkloads } from "./ServerWorkloads";
import { BackLink, Link, Loading, ProblemBox, StatusBadge, Table, Tabs, useConfirm } from "../components/ui";
import { currentUser } from "../lib/auth";
import { bytes, percent } from "../lib/format";
import { newestJob, serverStatusAfter, useLive } from "../lib/live";
import { asProblem, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import { selectTab, tabOf } from "../lib/router";
import { useTitle } from "../lib/title";
import { Ago } from "../components/Ago";

type Detail = Schemas["ServerDetail"];
type Job = Schemas["Job"];
type Range = "1h" | "24h" | "7d" | "30d" | "90d";
const ranges: Range[] = ["1h", "24h", "7d", "30d", "90d"];

interface Pending {
  type: string;
  target: string;
  label: string;
}

// ServerDetail shows a server's facts, metric charts and inventory, and
// runs service and container actions whose jobs it follows live.
export function ServerDetail({ id, tab: wanted }: { id: string; tab?: string }) {
  const res = useResource(() => ok(api.GET("/api/v1/servers/{id}", { params: { path: { id } } })), [id]);
  const { data: srv, reload: load, set: setSrv } = res;
  const [actionProblem, setProblem] = useState<Problem | null>(null);
  const problem = actionProblem ?? res.problem;
  const [jobs, setJobs] = useState<Job[]>([]);
  const confirm = useConfirm((p: Pending) => ({ title: `${p.label} ${p.type.split(".")[0]}`, action: p.label, object: p.target, run: () => act(p) }));
  const admin = currentUser()?.admin ?? false;
  const tabs = ["overview", "services", "containers", "ports", ...(admin ? (["logs"] as const) : [])] as const;
  const tab = tabOf(wanted, tabs);
  const setTab = selectTab("/servers/" + id, "overview");
  useTitle(tab !== "overview" && tabLabel(tab), srv?.name, "Servers");

  useLive(
    ["event", "job"],
    (data, type) => {
      if (type === "reset") {
        void load();
        return;
      }
      if (type === "event" && data?.subject?.id === id) {
        const s = serverStatusAfter(data.type);
        if (s) setSrv((cur) => (cur ? { ...cur, status: s as Detail["status"] } : cur));
      }
      if (type === "job" && data?.server_id === id) {
        setJobs((list) => (list.some((j) => j.id === data.id) ? list.map((j) => (j.id === data.id ? data : j)) : list));
        // A finished service or container action changes the inventory.
        if (["succeeded", "failed"].includes(data.status) && /^(service|container)\./.test(data.type)) void load();
      }
    },
    [id],
  );

  async function act(p: Pending) {
    setProblem(null);
    try {
      const payload = p.type.startsWith("service.") ? { unit: p.target } : { container: p.target };
      const res = await ok(api.POST("/api/v1/servers/{id}/actions", { params: { path: { id } }, body: { type: p.type, payload } }));
      const job = newestJob(res.job);
      setJobs((list) => [job, ...list.filter((j) => j.id !== job.id)]);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  function ask(type: string, target: string, verb: string) {
    const p = { type, target, label: verb };
    if (verb === "Start") void act(p);
    else confirm.ask(p);
  }

  if (!srv) return problem ? <ProblemBox problem={problem} /> : <Loading what="the server" />;
  const f = srv.facts;
  const m = srv.latest_metrics;
  const inv = srv.inventory;
  return (
    <section>
      <BackLink href="/servers" label="Servers" />
      <div class="row wrap">
        <h1>{srv.name}</h1>
        <StatusBadge status={srv.status} />
        {(srv.tags ?? []).map((t) => (
          <span key={t} class="tag">
            {t}
          </span>
        ))}
      </div>
      <ProblemBox problem={problem} />
      {jobs.length > 0 && (
        <div class="card" aria-live="polite">
          <h2>Actions</h2>
          <ul class="joblist">
            {jobs.map((j) => (
              <li key={j.id}>
                <StatusBadge status={j.status} /> <Link href={"/jobs/" + j.id}>{j.type}</Link>{" "}
                <span class="muted">{describePayload(j.payload)}</span>
                {j.error && <span class="lvl-error"> — {j.error}</span>}
              </li>
            ))}
          </ul>
        </div>
      )}
      <Tabs label="Server sections" current={tab} onSelect={setTab}
        tabs={tabs.map((t) => ({ id: t, label: tabLabel(t) }))} />
      {tab === "overview" && (
        <>
          <div class="grid2">
            <div class="card">
              <h2>Facts</h2>
              {f ? (
                <dl class="facts">
                  <dt>Host</dt>
                  <dd>{f.hostname}</dd>
                  <dt>OS</dt>
                  <dd>
                    {f.os} {f.os_version} ({f.arch})
                  </dd>
                  <dt>Kernel</dt>
                  <dd>{f.kernel}</dd>
                  <dt>CPUs</dt>
                  <dd>{f.cpu_count}</dd>
                  <dt>Memory</dt>
                  <dd>{bytes(f.memory_bytes)}</dd>
                  <dt>Addresses</dt>
                  <dd>{[...(f.public_addresses ?? []), ...(f.private_addresses ?? [])].join(", ") || "–"}</dd>
                  <dt>Agent</dt>
                  <dd>{srv.agent_version || f.agent_version}</dd>
                  <dt>Last seen</dt>
                  <dd><Ago at={srv.last_seen_at} /></dd>
                </dl>
              ) : (
                <p class="muted">No facts yet: the agent has not enrolled.</p>
              )}
            </div>
            <div class="card">
              <h2>Now</h2>
              {m ? (
                <dl class="facts">
                  <dt>CPU</dt>
                  <dd>{percent(m.cpu_percent)}</dd>
                  <dt>Memory</dt>
                  <dd>{percent(m.memory_used_percent)}</dd>
                  <dt>Disk</dt>
                  <dd>{percent(m.disk_used_percent)}</dd>
                  <dt>Load</dt>
                  <dd>{m.load1.toFixed(2)}</dd>
                  <dt>Sampled</dt>
                  <dd><Ago at={m.at} /></dd>
                </dl>
              ) : (
                <p class="muted">No metrics yet.</p>
              )}
            </div>
          </div>
          <ServerWorkloads id={id} />
          <Metrics id={id} />
        </>
      )}
      {tab === "services" && (
        <div class="card scroll-x">
          <Table label="Services" columns={["Unit", "State", "Description", admin && "Actions"]}
            empty={!inv?.services?.length && "No services reported."}>
            {(inv?.services ?? []).map((s) => (
              <tr key={s.name}>
                <td>{s.name}</td>
                <td>
                  {s.active_state} ({s.sub_state})
                </td>
                <td>{s.description}</td>
                {admin && (
                  <td>
                    <Actions kind="service" name={s.name} onAct={ask} />
                  </td>
                )}
              </tr>
            ))}
          </Table>
        </div>
      )}
      {tab === "containers" && (
        <ServerContainers srv={srv} reload={() => void load()}
          actions={admin ? (name) => <Actions kind="container" name={name} onAct={ask} /> : undefined} />
      )}
      {tab === "ports" && (
        <div class="card scroll-x">
          <Table label="Listening ports" columns={["Port", "Protocol", "Address", "Process"]}
            empty={!inv?.ports?.length && "No listening ports reported."}>
            {(inv?.ports ?? []).map((p) => (
              <tr key={`${p.protocol}/${p.address}/${p.port}`}>
                <td>{p.port}</td>
                <td>{p.protocol}</td>
                <td>{p.address}</td>
                <td>{p.process ?? "–"}</td>
              </tr>
            ))}
          </Table>
        </div>
      )}
      {tab === "logs" && admin && (
        <Logs serverId={id} units={(inv?.services ?? []).map((s) => s.name)} containers={(inv?.containers ?? []).map((c) => c.name)} />
      )}
      {confirm.dialog}
    </section>
  );
}

function tabLabel(t: string): string {
  return t[0].toUpperCase() + t.slice(1);
}

function describePayload(p: unknown): string {
  if (!p || typeof p !== "object") return "";
  const o = p as Record<string, unknown>;
  return String(o.container ?? o.unit ?? "");
}

function Actions({ kind, name, onAct }: { kind: "service" | "container"; name: string; onAct: (t: string, n: string, verb: string) => void }) {
  return (
    <div class="actions">
      {(["Start", "Stop", "Restart"] as const).map((verb) => (
        <button key={verb} type="button" class={verb === "Start" ? "" : "danger"} aria-label={`${verb} ${name}`}
          onClick={() => onAct(`${kind}.${verb.toLowerCase()}`, name, verb)}>
          {verb}
        </button>
      ))}
    </div>
  );
}

function Metrics({ id }: { id: string }) {
  const [range, setRange] = useState<Range>("1h");
  const { data, problem } = useResource(
    () => ok(api.GET("/api/v1/servers/{id}/metrics", { params: { path: { id }, query: { range } } })),
    [id, range],
  );
  const charts = useMemo(() => {
    const pts = data?.series ?? [];
    const t = pts.map((p) => Date.parse(p.t) / 1000);
    return {
      t,
      cpu: [{ label: "CPU", values: pts.map((p) => p.cpu_percent) }],
      mem: [{ label: "Memory", values: pts.map((p) => p.memory_used_percent) }],
      disk: [{ label: "Disk", values: pts.map((p) => p.disk_used_percent) }],
      net: [
        { label: "In", values: pts.map((p) => p.net_rx_bytes_per_s) },
        { label: "Out", values: pts.map((p) => p.net_tx_bytes_per_s) },
      ],
    };
  }, [data]);
  return (
    <div>
      <div class="row wrap between">
        <h2>Metrics</h2>
        <div class="row" role="group" aria-label="Range">
          {ranges.map((r) => (
            <button key={r} type="button" aria-pressed={r === range} class={r === range ? "primary" : ""} onClick={() => setRange(r)}>
              {r}
            </button>
          ))}
        </div>
      </div>
      <ProblemBox problem={problem} />
      {data && charts.t.length === 0 && <p class="muted">No samples in this range.</p>}
      {data && charts.t.length > 0 && (
        <div class="charts">
          <Chart title="CPU" kind="percent" times={charts.t} series={charts.cpu} />
          <Chart title="Memory" kind="percent" times={charts.t} series={charts.mem} />
          <Chart title="Disk" kind="percent" times={charts.t} series={charts.disk} />
          <Chart title="Network" kind="rate" times={charts.t} series={charts.net} />
        </div>
      )}
    </div>
  );
}

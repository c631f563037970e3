import { useMemo, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { Chart } from "../components/Chart";
import { Field, Link, Loading, ProblemBox, StatusBadge, useConfirm } from "../components/ui";
import { certLeft, trafficSeries } from "../lib/apps";
import { currentUser } from "../lib/auth";
import { bytes } from "../lib/format";
import { asProblem, fieldErrors, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import { useJobEnd } from "../lib/useJob";
import "./apps.css";
import { Ago } from "../components/Ago";

type Detail = Schemas["ApplicationDetail"];
type Domain = Schemas["Domain"];
type Job = Schemas["Job"];
type TLS = Domain["tls_mode"];

const tlsLabel: Record<TLS, string> = {
  auto: "auto (publicly trusted, ACME)",
  internal: "internal (the proxy's local CA)",
  off: "off (plain HTTP)",
};

// AppDomains lists an application's domains with their TLS mode and
// latest check, and adds, changes, checks and removes them; each change's
// proxy job and each check are followed live.
export function AppDomains({ app }: { app: Detail }) {
  const res = useResource(
    async () => (await ok(api.GET("/api/v1/domains", { params: { query: { application_id: app.id } } }))).domains ?? [],
    [app.id],
  );
  const admin = currentUser()?.admin ?? false;
  const [problem, setProblem] = useState<Problem | null>(null);
  const [hostname, setHostname] = useState("");
  const [tls, setTLS] = useState<TLS>("auto");
  const [www, setWWW] = useState(false);
  const [proxyJob, setProxyJob] = useState<Job | null>(null);
  const [proxyDone, setProxyDone] = useState<string | null>(null);
  const confirm = useConfirm((d: Domain) => ({ title: "Remove the domain", action: "Remove", object: d.hostname,
    run: () => run(ok(api.DELETE("/api/v1/domains/{id}", { params: { path: { id: d.id } } })), proxy) }));
  const errs = fieldErrors(problem);
  useJobEnd(proxyJob, (status) => setProxyDone(status));

  async function run<T>(p: Promise<T>, after?: (v: T) => void) {
    setProblem(null);
    try {
      const v = await p;
      after?.(v);
      await res.reload();
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  const proxy = (c: Schemas["DomainChange"]) => {
    setProxyDone(null);
    setProxyJob(c.job_id ? c.job : null);
  };
  function add(e: Event) {
    e.preventDefault();
    void run(ok(api.POST("/api/v1/domains", { body: { hostname: hostname.trim(), application_id: app.id, tls_mode: tls, redirect_www: www } })), (c) => {
      setHostname("");
      proxy(c);
    });
  }
  const list = res.data;
  return (
    <div>
      <ProblemBox problem={problem} fields={admin ? ["hostname", "tls_mode", "redirect_www"] : []} />
      {proxyJob && (
        <p class="card" aria-live="polite">
          Proxy update <StatusBadge status={proxyDone ?? "running"} />{" "}
          {proxyDone === "succeeded" ? "The server's proxy serves the change." : proxyDone ? "The previous proxy configuration keeps serving." : "Applying on the server…"}
        </p>
      )}
      {admin && (
        <form class="card form" aria-label="Add a domain" onSubmit={add} noValidate>
          <h2>Add a domain</h2>
          <Field label="Hostname" name="domain-hostname" errors={errs.hostname} hint="Lowercase, e.g. shop.example.com; its DNS should point at the server.">
            <input id="domain-hostname" class="mono" value={hostname} aria-invalid={errs.hostname ? true : undefined}
              onInput={(e) => setHostname((e.target as HTMLInputElement).value)} />
          </Field>
          <Field label="TLS" name="domain-tls" errors={errs.tls_mode}>
            <select id="domain-tls" value={tls} onChange={(e) => setTLS((e.target as HTMLSelectElement).value as TLS)}>
              {(Object.keys(tlsLabel) as TLS[]).map((m) => (
                <option key={m} value={m}>
                  {tlsLabel[m]}
                </option>
              ))}
            </select>
          </Field>
          <label class="check">
            <input type="checkbox" checked={www} onChange={(e) => setWWW((e.target as HTMLInputElement).checked)} /> Redirect www.{hostname || "…"} to it
          </label>
          <div class="row wrap">
            <button type="submit" class="primary">
              Add the domain
            </button>
            <button type="button" onClick={() => void run(ok(api.POST("/api/v1/domains/servers/{server_id}/apply", { params: { path: { server_id: app.server_id } } })),
              (a) => { setProxyDone(null); setProxyJob(a.job); })}>
              Apply the server's proxy again
            </button>
          </div>
        </form>
      )}
      {!list && !res.problem && <Loading what="domains" />}
      <ProblemBox problem={res.problem} />
      {list && list.length === 0 && <p class="card muted">No domains: the application is reachable only once one points at it.</p>}
      {(list ?? []).map((d) => (
        <DomainCard key={d.id} d={d} admin={admin} reload={res.reload} onProxy={proxy} onRemove={() => confirm.ask(d)} onProblem={setProblem} />
      ))}
      {confirm.dialog}
    </div>
  );
}

function DomainCard(props: { d: Domain; admin: boolean; reload: () => Promise<void>; onProxy: (c: Schemas["DomainChange"]) => void;
  onRemove: () => void; onProblem: (p: Problem) => void }) {
  const { d, admin } = props;
  const [checking, setChecking] = useState<Job | null>(null);
  useJobEnd(checking, () => {
    setChecking(null);
    void props.reload();
  });
  const c = d.check;
  async function act(p: Promise<unknown>) {
    try {
      await p;
    } catch (err) {
      props.onProblem(asProblem(err));
    }
  }
  return (
    <div class="card domain" data-domain={d.hostname} data-proxy-status={d.proxy.status} data-checked-at={c?.checked_at ?? ""} data-cert={c?.cert_not_after ? "served" : "none"}>
      <div class="row wrap between">
        <h2>
          <a href={(d.tls_mode === "off" ? "http://" : "https://") + d.hostname} rel="noreferrer">
            {d.hostname}
          </a>
        </h2>
        {admin && (
          <div class="row wrap">
            <label class="inline">
              TLS{" "}
              <select aria-label={`TLS mode of ${d.hostname}`} value={d.tls_mode} onChange={(e) => void act(
                ok(api.PATCH("/api/v1/domains/{id}", { params: { path: { id: d.id } }, body: { tls_mode: (e.target as HTMLSelectElement).value as TLS } }))
                  .then((ch) => { props.onProxy(ch); return props.reload(); }))}>
                {(Object.keys(tlsLabel) as TLS[]).map((m) => (
                  <option key={m} value={m}>
                    {m}
                  </option>
                ))}
              </select>
            </label>
            <button type="button" disabled={!!checking} aria-label={`Check ${d.hostname}`}
              onClick={() => void act(ok(api.POST("/api/v1/domains/{id}/check", { params: { path: { id: d.id } } })).then((a) => setChecking(a.job)))}>
              Check
            </button>
            <button type="button" class="danger" aria-label={`Remove ${d.hostname}`} onClick={props.onRemove}>
              Remove
            </button>
          </div>
        )}
      </div>
      <p class="muted">
        TLS {tlsLabel[d.tls_mode]}
        {d.redirect_www ? `; www.${d.hostname} redirects here` : ""}; added <Ago at={d.created_at} />.
      </p>
      {d.proxy.status === "failed" && (
        <p class="lvl-error" role="alert" data-proxy="failed">
          The server's proxy did not take this domain's latest change, so it is not served as set
          {d.proxy.error ? ": " + d.proxy.error : "."}
          {d.proxy.job_id && (
            <>
              {" "}
              <Link href={"/jobs/" + d.proxy.job_id}>The proxy job</Link>
            </>
          )}
        </p>
      )}
      {d.proxy.status === "applying" && <p class="muted" data-proxy="applying">The server's proxy is taking this domain's latest change.</p>}
      {!c ? (
        <p class="muted">Not checked yet.</p>
      ) : (
        <dl class="facts">
          <dt>Check</dt>
          <dd>
            <StatusBadge status={c.status} /> <Ago at={c.checked_at} />
          </dd>
          <dt>DNS</dt>
          <dd>
            {(c.addresses ?? []).join(", ") || "no address"}{" "}
            {c.points_to_server ? <StatusBadge status="points to the server" /> : <StatusBadge status="not the server" />}
            <span class="muted">
              {" "}
              compared with the server's {c.compared_with} addresses {(c.server_addresses ?? []).join(", ")}
            </span>
          </dd>
          <dt>Certificate</dt>
          <dd>
            {c.cert_not_after ? (
              <>
                {c.cert_issuer} · {certLeft(c.cert_not_after)} (until {new Date(c.cert_not_after).toLocaleDateString()})
                {c.cert_not_before && <span class="muted"> since {new Date(c.cert_not_before).toLocaleDateString()}</span>}
                <div class="muted">Names: {(c.cert_dns_names ?? []).join(", ")}</div>
              </>
            ) : (
              "none served"
            )}
          </dd>
          {(c.errors ?? []).length > 0 && (
            <>
              <dt>Errors</dt>
              <dd class="lvl-error">{(c.errors ?? []).join("; ")}</dd>
            </>
          )}
          {(c.notes ?? []).length > 0 && (
            <>
              <dt>Notes</dt>
              <dd>{(c.notes ?? []).join("; ")}</dd>
            </>
          )}
        </dl>
      )}
    </div>
  );
}

type Range = "1h" | "24h" | "7d";

// AppTraffic charts the requests the proxy served for the application's
// domains: counts by status class, p95 latency and bytes out.
export function AppTraffic({ app }: { app: Detail }) {
  const [range, setRange] = useState<Range>("1h");
  const res = useResource(
    () => ok(api.GET("/api/v1/applications/{id}/requests", { params: { path: { id: app.id }, query: { range } } })),
    [app.id, range],
  );
  const data = res.data;
  const s = useMemo(() => trafficSeries(data?.points ?? []), [data]);
  const t = data?.totals;
  return (
    <div>
      <div class="row wrap between">
        <h2>Requests</h2>
        <div class="row wrap">
          <div class="row" role="group" aria-label="Range">
            {(["1h", "24h", "7d"] as Range[]).map((r) => (
              <button key={r} type="button" aria-pressed={r === range} class={r === range ? "primary" : ""} onClick={() => setRange(r)}>
                {r}
              </button>
            ))}
          </div>
          <button type="button" onClick={() => void res.reload()} disabled={res.loading}>
            Refresh
          </button>
        </div>
      </div>
      <ProblemBox problem={res.problem} />
      {!data && !res.problem && <Loading what="traffic" />}
      {data && t && (
        <>
          <div class="card">
            <dl class="facts traffic-totals">
              <dt>Requests</dt>
              <dd data-total={t.count}>{t.count}</dd>
              <dt>By status</dt>
              <dd>
                2xx {t.status_2xx} · 3xx {t.status_3xx} · 4xx {t.status_4xx} · 5xx {t.status_5xx}
              </dd>
              <dt>p95</dt>
              <dd>{t.p95_ms == null ? "–" : `${Math.round(t.p95_ms)} ms`}</dd>
              <dt>Sent</dt>
              <dd>{bytes(t.bytes_out)}</dd>
              <dt>Hosts</dt>
              <dd>{(data.hosts ?? []).join(", ") || "no domains"}</dd>
            </dl>
          </div>
          {s.t.length > 0 && (
            <div class="charts">
              <Chart title="Requests" kind="count" times={s.t} series={s.requests} />
              <Chart title="p95 latency" kind="ms" times={s.t} series={s.p95} />
              <Chart title="Bytes out" kind="bytes" times={s.t} series={s.bytes} />
            </div>
          )}
        </>
      )}
    </div>
  );
}

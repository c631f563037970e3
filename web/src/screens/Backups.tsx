import { useMemo, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { Field, Link, Loading, ProblemBox, StatusBadge, SubNav, Table, useConfirm } from "../components/ui";
import { currentUser } from "../lib/auth";
import {
  busyWith,
  filterFromQuery,
  liveSteps,
  filterToQuery,
  policyBody,
  runQuery,
  settingsBody,
  stepRows,
  trackJobs,
  verificationDetails,
  verifiedLabels,
  verifiedState,
  type PolicyForm,
  type RunFilter,
  type S3Form,
  type StorageStep,
} from "../lib/backups";
import { bytes, duration } from "../lib/format";
import { finishedStates, mergeEvents } from "../lib/jobs";
import { newestJob, useLive } from "../lib/live";
import { asProblem, fieldErrors, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import { navigate, useLocation } from "../lib/router";
import "./ops.css";
import { Ago } from "../components/Ago";
import { useTitle } from "../lib/title";

type Run = Schemas["RunView"];
type Job = Schemas["Job"];
type JobEvent = Schemas["Event"];
type Policy = Schemas["PolicyView"];
type Instance = Schemas["Detail"];

function BackupsNav({ at }: { at: "runs" | "policies" | "storage" }) {
  return (
    <SubNav
      label="Backups"
      items={[
        { href: "/backups", label: "Backups", current: at === "runs" },
        { href: "/backups/policies", label: "Policies", current: at === "policies" },
        { href: "/backups/storage", label: "Storage", current: at === "storage" },
      ]}
    />
  );
}

function isBackupJob(data: { type?: string } | null | undefined): boolean {
  return /^backup\./.test(data?.type ?? "");
}

// useInstances loads the database instances, for their names.
function useInstances() {
  const res = useResource(async () => (await ok(api.GET("/api/v1/databases"))).databases ?? []);
  const names = useMemo(() => Object.fromEntries((res.data ?? []).map((i) => [i.id, i.name])) as Record<string, string>, [res.data]);
  return { list: res.data ?? [], names };
}

// useJob follows one job live: its state from the stream's job messages,
// its events from job.events, and once it finished, the job as the
// backups read it (its data and events).
function useJob(onFinished?: (j: Schemas["JobDetail"]) => void) {
  const [job, setJob] = useState<Job | null>(null);
  const [events, setEvents] = useState<JobEvent[]>([]);
  const [detail, setDetail] = useState<Schemas["JobDetail"] | null>(null);

  async function finish(id: string) {
    try {
      const full = await ok(api.GET("/api/v1/backups/jobs/{job_id}", { params: { path: { job_id: id } } }));
      setDetail(full);
      setJob(full);
      // The finished job's own events are all of them.
      if (full.events?.length) setEvents(full.events);
      onFinished?.(full);
    } catch {
      // The job is shown as the stream reported it.
    }
  }

  useLive(
    ["job", "job.events"],
    (data, type) => {
      if (!job) return;
      if (type === "reset" || (type === "job" && data?.id === job.id)) {
        if (type === "job") setJob((cur) => (cur ? { ...cur, ...data } : cur));
        if (type === "reset" || finishedStates.includes(data.status)) void finish(job.id);
      }
      if (type === "job.events" && data?.job_id === job.id) setEvents((cur) => mergeEvents(cur, data.events as JobEvent[]));
    },
    [job?.id],
  );

  return {
    job,
    events,
    detail,
    start(j: Job) {
      const now = newestJob(j);
      setJob(now);
      setEvents([]);
      setDetail(null);
      if (finishedStates.includes(now.status)) void finish(now.id);
    },
    clear() {
      setJob(null);
      setEvents([]);
      setDetail(null);
    },
  };
}

function JobProgress({ title, job, events }: { title: string; job: Job; events: JobEvent[] }) {
  return (
    <div class="card job-progress" aria-live="polite" data-job={job.id}>
      <div class="row wrap">
        <strong>{title}</strong>
        <StatusBadge status={job.status} />
        <Link href={"/jobs/" + job.id}>job</Link>
      </div>
      {events.length > 0 && (
        <div class="log">
          {events.map((e, i) => (
            <div key={i} class={"lvl-" + e.level}>
              <span class="muted">{new Date(e.at).toLocaleTimeString()}</span> {e.message}
            </div>
          ))}
        </div>
      )}
      {job.error && <p class="lvl-error">{job.error}</p>}
    </div>
  );
}

function Verified({ run, busy }: { run: Run; busy: string }) {
  if (busy) return <span class="badge s-running">{busy}…</span>;
  const v = verifiedState(run);
  if (v === "none") return <span class="muted">–</span>;
  return (
    <span class={"badge v-" + v} title={run.verified ? new Date(run.verified.at).toLocaleString() : undefined}>
      {verifiedLabels[v]}
    </span>
  );
}

// Runs lists the backups newest first with the summary per instance,
// filtered by instance, status and verification; kept current from the
// stream. Administrators back up an instance now.
export function Runs() {
  useTitle("Backups");
  const { path, query } = useLocation();
  const filter = filterFromQuery(query);
  const key = filterToQuery(filter);
  const instances = useInstances();
  const admin = currentUser()?.admin ?? false;
  const [older, setOlder] = useState<{ runs: Run[]; cursor?: string }>({ runs: [] });
  const [busy, setBusy] = useState<Record<string, Record<string, string>>>({});
  const [actionProblem, setProblem] = useState<Problem | null>(null);
  const res = useResource(async () => {
    const r = await ok(api.GET("/api/v1/backups", { params: { query: runQuery(filter) } }));
    setOlder({ runs: [], cursor: r.next_cursor });
    return r.runs ?? [];
  }, [key]);
  const summary = useResource(() => ok(api.GET("/api/v1/backups/summary")));
  const problem = actionProblem ?? res.problem ?? summary.problem;

  useLive(["job", "event"], (data, type) => {
    if (type === "job" && isBackupJob(data)) setBusy((cur) => trackJobs(cur, data));
    if (type === "reset" || (type === "job" && isBackupJob(data)) || (type === "event" && /^backup\./.test(data?.type ?? ""))) {
      void res.reload();
      void summary.reload();
    }
  });

  function setFilter(f: RunFilter) {
    navigate(path + filterToQuery(f), true);
  }

  async function loadOlder() {
    try {
      const r = await ok(api.GET("/api/v1/backups", { params: { query: runQuery(filter, 50, older.cursor) } }));
      setOlder((o) => ({ runs: [...o.runs, ...(r.runs ?? [])], cursor: r.next_cursor }));
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  const runs = [...(res.data ?? []), ...older.runs];
  const sum = summary.data;
  return (
    <section>
      <h1>Backups</h1>
      <BackupsNav at="runs" />
      <ProblemBox problem={problem} />
      {sum && (
        <div class="card">
          <p class="counts">
            <span>
              <strong>{sum.count}</strong> backups ({bytes(sum.total_size)})
            </span>
            <span>
              <strong>{sum.verified_count}</strong> verified
            </span>
            <span>
              <strong>{sum.unverified_count}</strong> not verified
            </span>
          </p>
          {(sum.instances ?? []).length > 0 && (
            <div class="scroll-x">
              <Table label="Backups per instance" columns={["Instance", "Last success", "Last verified", "Failures"]}>
                {(sum.instances ?? []).map((i) => (
                  <tr key={i.instance_id} data-instance={i.instance_id}>
                    <td>
                      <Link href={"/backups" + filterToQuery({ ...filter, instance_id: i.instance_id })}>
                        {instances.names[i.instance_id] ?? i.instance_id}
                      </Link>
                    </td>
                    <td><Ago at={i.last_success_at} /></td>
                    <td><Ago at={i.last_verified_at} /></td>
                    <td class={i.failures ? "lvl-error" : ""}>{i.failures}</td>
                  </tr>
                ))}
              </Table>
            </div>
          )}
        </div>
      )}
      {admin && <BackupNow instances={instances.list} onQueued={() => void res.reload()} />}
      <div class="filters" role="search" aria-label="Filter backups">
        <label class="sr-only" for="f-instance">
          Instance
        </label>
        <select id="f-instance" value={filter.instance_id} onChange={(e) => setFilter({ ...filter, instance_id: e.currentTarget.value })}>
          <option value="">Every instance</option>
          {instances.list.map((i) => (
            <option key={i.id} value={i.id}>
              {i.name}
            </option>
          ))}
        </select>
        <label class="sr-only" for="f-status">
          Status
        </label>
        <select id="f-status" value={filter.status} onChange={(e) => setFilter({ ...filter, status: e.currentTarget.value })}>
          <option value="">Any status</option>
          {["queued", "running", "succeeded", "failed"].map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
        <label class="sr-only" for="f-verified">
          Verification
        </label>
        <select id="f-verified" value={filter.verified} onChange={(e) => setFilter({ ...filter, verified: e.currentTarget.value })}>
          <option value="">Verified or not</option>
          <option value="true">Verified</option>
          <option value="false">Not verified</option>
        </select>
      </div>
      {!res.data && !res.problem && <Loading what="backups" />}
      {res.data && (
        <div class="card scroll-x">
          <Table label="Backups" columns={["Started", "Instance", "Database", "Status", "Verified", "Size", "Trigger"]}>
            {runs.map((r) => (
              <tr key={r.id} data-run={r.id}>
                <td>
                  <Link href={"/backups/runs/" + r.id}><Ago at={r.created_at} /></Link>
                </td>
                <td>{instances.names[r.instance_id] ?? r.instance_id}</td>
                <td>{r.database || <span class="muted">whole instance</span>}</td>
                <td>
                  <StatusBadge status={r.status} />
                  {r.delete_pending && <span class="badge s-cancelled">deleting</span>}
                  {r.error && <div class="lvl-error small">{r.error}</div>}
                </td>
                <td>
                  <Verified run={r} busy={busyWith(busy[r.id])} />
                </td>
                <td>{r.status === "succeeded" ? bytes(r.size) : "–"}</td>
                <td>{r.trigger}</td>
              </tr>
            ))}
          </Table>
          {runs.length === 0 && <p class="muted">{key ? "No backup matches the filters." : "No backups yet."}</p>}
          {older.cursor && (
            <button type="button" onClick={() => void loadOlder()}>
              Older backups
            </button>
          )}
        </div>
      )}
    </section>
  );
}

function BackupNow({ instances, onQueued }: { instances: Instance[]; onQueued: () => void }) {
  const [instance, setInstance] = useState("");
  const [database, setDatabase] = useState("");
  const [problem, setProblem] = useState<Problem | null>(null);
  const [busy, setBusy] = useState(false);
  const follow = useJob(() => onQueued());
  const errs = fieldErrors(problem);
  const chosen = instances.find((i) => i.id === instance);
  const kv = chosen?.engine === "redis" || chosen?.engine === "valkey";

  async function submit(e: Event) {
    e.preventDefault();
    setBusy(true);
    setProblem(null);
    try {
      const body: { instance_id: string; database?: string } = { instance_id: instance };
      if (database.trim() && !kv) body.database = database.trim();
      const r = await ok(api.POST("/api/v1/backups/run", { body }));
      onQueued();
      follow.start(await ok(api.GET("/api/v1/backups/jobs/{job_id}", { params: { path: { job_id: r.job_id } } })));
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setBusy(false);
    }
  }

  return (
    <form class="card backup-now" onSubmit={submit} aria-label="Back up now" noValidate>
      <ProblemBox problem={problem} fields={["instance_id", "database"]} />
      <div class="row wrap end-items">
        <Field label="Instance" name="instance_id" errors={errs.instance_id}>
          <select id="instance_id" value={instance} aria-invalid={errs.instance_id ? true : undefined}
            onChange={(e) => setInstance(e.currentTarget.value)}>
            <option value="">Choose…</option>
            {instances.map((i) => (
              <option key={i.id} value={i.id}>
                {i.name} ({i.engine})
              </option>
            ))}
          </select>
        </Field>
        {!kv && (
          <Field label="Database" name="database" errors={errs.database} hint={chosen ? `Empty: ${chosen.database}` : "Empty: the initial one"}>
            <input id="database" value={database} aria-invalid={errs.database ? true : undefined}
              aria-describedby={errs.database ? "database-error" : "database-hint"} onInput={(e) => setDatabase(e.currentTarget.value)} />
          </Field>
        )}
        <button type="submit" class="primary" disabled={busy || !instance}>
          Back up now
        </button>
      </div>
      {follow.job && <JobProgress title="Backup" job={follow.job} events={follow.events} />}
    </form>
  );
}

// RunDetail shows one backup with its manifest and verification, live;
// administrators verify, restore and delete it.
export function RunDetail({ id }: { id: string }) {
  const res = useResource(() => ok(api.GET("/api/v1/backups/{run_id}", { params: { path: { run_id: id } } })), [id]);
  const instances = useInstances();
  const admin = currentUser()?.admin ?? false;
  const [actionProblem, setProblem] = useState<Problem | null>(null);
  const [busy, setBusy] = useState<Record<string, Record<string, string>>>({});
  const confirm = useConfirm((what: "delete" | "replace") =>
    what === "replace"
      ? { title: "Replace a database", action: "Replace", object: `database ${target} on ${instName}`, run: () => act("restore") }
      : { title: "Delete the backup", action: "Delete", object: `the backup of ${run?.database || instName} from ${new Date(run?.created_at ?? 0).toLocaleString()}`,
          run: () => act("delete") });
  const [mode, setMode] = useState<"new" | "replace">("new");
  const [into, setInto] = useState("");
  const [label, setLabel] = useState("");
  const follow = useJob(() => void res.reload());
  const run = res.data;
  useTitle(run && `Backup of ${run.database || (instances.names[run.instance_id] ?? run.instance_id)}`, "Backups");
  const problem = actionProblem ?? res.problem;
  const errs = fieldErrors(actionProblem);

  useLive(
    ["job"],
    (data, type) => {
      if (type === "reset") return void res.reload();
      if (isBackupJob(data) && (data.id === run?.job_id || (data.payload as { run_id?: string })?.run_id === id)) {
        setBusy((cur) => trackJobs(cur, data));
        void res.reload();
      }
    },
    [id, run?.job_id],
  );

  async function act(what: "verify" | "restore" | "delete") {
    setProblem(null);
    try {
      let r;
      if (what === "verify") r = await ok(api.POST("/api/v1/backups/{run_id}/verify", { params: { path: { run_id: id } } }));
      else if (what === "delete") r = await ok(api.DELETE("/api/v1/backups/{run_id}", { params: { path: { run_id: id } } }));
      else {
        const body: { mode: "new" | "replace"; into?: string } = { mode };
        if (into.trim()) body.into = into.trim();
        r = await ok(api.POST("/api/v1/backups/{run_id}/restore", { params: { path: { run_id: id } }, body }));
      }
      setLabel({ verify: "Verification", restore: mode === "new" ? "Restore into a new database" : "Restore in place", delete: "Deletion" }[what]);
      follow.start(r.job);
      void res.reload();
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  if (!run || res.problem?.status === 404) {
    if (res.problem?.status === 404)
      return (
        <section>
          <p>
            <Link href="/backups">← Backups</Link>
          </p>
          <h1>Backup</h1>
          <p>This backup is gone: it was deleted, locally and in storage.</p>
        </section>
      );
    return problem ? <ProblemBox problem={problem} /> : <Loading what="the backup" />;
  }
  const instName = instances.names[run.instance_id] ?? run.instance_id;
  const v = run.verified ? verificationDetails(run.verified.details) : null;
  const usable = run.status === "succeeded" && !run.delete_pending;
  const sql = run.manifest?.kind !== "kv";
  const target = into.trim() || run.database;
  const restoreResult = follow.detail && follow.detail.type === "backup.restore" ? verificationDetails(follow.detail.data) : null;
  return (
    <section>
      <p>
        <Link href="/backups">← Backups</Link>
      </p>
      <div class="row wrap">
        <h1 class="long-title">
          Backup of {instName}
          {run.database ? ` / ${run.database}` : ""}
        </h1>
        <StatusBadge status={run.status} />
        <Verified run={run} busy={busyWith(busy[run.id])} />
        {run.delete_pending && <span class="badge s-cancelled">being deleted</span>}
      </div>
      <ProblemBox problem={problem} fields={["mode", "into"]} />
      {follow.job && <JobProgress title={label} job={follow.job} events={follow.events} />}
      {restoreResult && follow.detail?.status === "succeeded" && (
        <p class="ok-note" role="status">
          Restored into <strong>{restoreResult.database}</strong>: {restoreResult.tables.length} tables match the manifest.
        </p>
      )}
      <div class="grid2">
        <div class="card">
          <h2>Backup</h2>
          <dl class="facts">
            <dt>Id</dt>
            <dd>
              <code>{run.id}</code>
            </dd>
            <dt>Instance</dt>
            <dd>
              {instName} ({run.engine})
            </dd>
            <dt>Database</dt>
            <dd>{run.database || "the whole instance"}</dd>
            <dt>Server</dt>
            <dd>
              <Link href={"/servers/" + run.server_id}>{run.server_id}</Link>
            </dd>
            <dt>Trigger</dt>
            <dd>{run.trigger}</dd>
            <dt>Queued</dt>
            <dd>{new Date(run.created_at).toLocaleString()}</dd>
            <dt>Finished</dt>
            <dd>
              {run.finished_at ? new Date(run.finished_at).toLocaleString() : "–"}
              {run.started_at && run.finished_at && (
                <span class="muted"> (in {duration(Date.parse(run.finished_at) - Date.parse(run.started_at))})</span>
              )}
            </dd>
            <dt>Size</dt>
            <dd>{run.status === "succeeded" ? bytes(run.size) + " (compressed, encrypted)" : "–"}</dd>
            <dt>SHA-256</dt>
            <dd>
              <code class="hash">{run.sha256 || "–"}</code>
            </dd>
            <dt>In storage</dt>
            <dd>
              <code>{run.locations.remote || "–"}</code>
            </dd>
            <dt>On the server</dt>
            <dd>
              <code>{run.locations.local || "no local copy"}</code>
            </dd>
            {run.error && (
              <>
                <dt>Error</dt>
                <dd class="lvl-error">{run.error}</dd>
              </>
            )}
            {run.delete_error && (
              <>
                <dt>Deletion</dt>
                <dd class="lvl-error">{run.delete_error}</dd>
              </>
            )}
          </dl>
        </div>
        <div class="card">
          <h2>Verification</h2>
          {!run.verified ? (
            <p class="muted">{usable ? "Not verified yet." : "Only a backup that succeeded can be verified."}</p>
          ) : (
            <>
              <p>
                <Verified run={run} busy="" /> {new Date(run.verified.at).toLocaleString()}
              </p>
              {v && (
                <dl class="facts">
                  <dt>Object</dt>
                  <dd>
                    {bytes(v.bytes)}, checksum {v.checksum_ok ? "matches" : "does not match"}
                  </dd>
                  <dt>Loaded into</dt>
                  <dd>
                    <code>{v.database || "–"}</code> <span class="muted">(dropped since)</span>
                  </dd>
                  {v.error && (
                    <>
                      <dt>Error</dt>
                      <dd class="lvl-error">{v.error}</dd>
                    </>
                  )}
                </dl>
              )}
            </>
          )}
          {admin && usable && (
            <div class="row wrap actions-bar">
              <button type="button" onClick={() => void act("verify")} disabled={!!busyWith(busy[run.id])}>
                Verify now
              </button>
            </div>
          )}
        </div>
      </div>
      {run.manifest && (
        <div class="card scroll-x">
          <h2>Manifest</h2>
          {run.manifest.keys && Object.keys(run.manifest.keys).length > 0 && (
            <p>
              Keys:{" "}
              {Object.entries(run.manifest.keys)
                .map(([t, n]) => `${n} ${t}`)
                .join(", ")}
            </p>
          )}
          <Table label="Manifest" columns={[sql ? "Table" : "Database", sql ? "Rows" : "Keys", "Checksum", v && "Verified"]}>
            {(run.manifest.tables ?? []).map((tb) => {
              const got = v?.tables.find((x) => x.name === tb.name);
              return (
                <tr key={tb.name}>
                  <td>{tb.name}</td>
                  <td>{tb.rows}</td>
                  <td>
                    <code>{tb.checksum}</code>
                  </td>
                  {v && (
                    <td class={got ? (got.ok ? "s-succeeded" : "lvl-error") : "muted"}>
                      {got ? (got.ok ? "✓ matches" : `✗ ${got.rows} rows, ${got.checksum}`) : "–"}
                    </td>
                  )}
                </tr>
              );
            })}
          </Table>
          {(run.manifest.tables ?? []).length === 0 && <p class="muted">No tables.</p>}
        </div>
      )}
      {admin && usable && (
        <div class="grid2">
          {sql ? (
            <form class="card form" aria-label="Restore" noValidate
              onSubmit={(e) => {
                e.preventDefault();
                if (mode === "replace") confirm.ask("replace");
                else void act("restore");
              }}>
              <h2>Restore</h2>
              <fieldset class="modes">
                <legend>Into</legend>
                <label class="check">
                  <input type="radio" name="mode" value="new" checked={mode === "new"} onChange={() => setMode("new")} /> a new database
                </label>
                <label class="check">
                  <input type="radio" name="mode" value="replace" checked={mode === "replace"} onChange={() => setMode("replace")} /> in
                  place of a database
                </label>
              </fieldset>
              <Field label={mode === "new" ? "New database" : "Database replaced"} name="into" errors={errs.into}
                hint={mode === "new" ? "Required: a name the instance does not have." : `Empty: ${run.database}. Restored aside, compared, then swapped in.`}>
                <input id="into" value={into} aria-invalid={errs.into ? true : undefined} aria-describedby={errs.into ? "into-error" : "into-hint"}
                  onInput={(e) => setInto(e.currentTarget.value)} />
              </Field>
              <div class="row">
                <button type="submit" class={mode === "replace" ? "danger" : "primary"}>
                  {mode === "new" ? "Restore into a new database" : "Replace the database"}
                </button>
              </div>
            </form>
          ) : (
            <div class="card">
              <h2>Restore</h2>
              <p class="muted">A {run.engine} backup is restored by hand: see the backups guide in the API documentation.</p>
            </div>
          )}
          <div class="card">
            <h2>Delete</h2>
            <p class="muted">Deletes the local copy on the server and the object in storage.</p>
            <button type="button" class="danger" onClick={() => confirm.ask("delete")}>
              Delete the backup
            </button>
          </div>
        </div>
      )}
      {confirm.dialog}
    </section>
  );
}

// Policies lists every instance's backup policy; administrators change
// one at a time.
export function Policies() {
  useTitle("Policies", "Backups");
  const res = useResource(async () => (await ok(api.GET("/api/v1/backups/policies"))).policies ?? []);
  const [editing, setEditing] = useState<string | null>(null);
  const admin = currentUser()?.admin ?? false;
  useLive(["event"], (data, type) => {
    if (type === "reset" || data?.type === "backup.stale") void res.reload();
  });
  return (
    <section>
      <h1>Backups</h1>
      <BackupsNav at="policies" />
      <ProblemBox problem={res.problem} />
      {!res.data && !res.problem && <Loading what="policies" />}
      {res.data && (
        <div class="card scroll-x">
          <Table label="Backup policies" columns={["Instance", "Enabled", "Every", "Keep", "Databases", "Verify", "Next", "Stale", admin && "Actions"]}>
            {res.data.map((p) => (
              <tr key={p.instance_id} data-policy={p.instance_name}>
                <td>
                  <Link href={"/backups?instance_id=" + p.instance_id}>{p.instance_name}</Link> <span class="muted">{p.engine}</span>
                </td>
                <td>{p.enabled ? <span class="s-succeeded">on</span> : "off"}</td>
                <td>{p.every_hours} h</td>
                <td>{p.keep}</td>
                <td>{(p.databases ?? []).join(", ") || <span class="muted">{/^(redis|valkey)$/.test(p.engine) ? "whole instance" : "initial"}</span>}</td>
                <td>{p.verify ? "yes" : "no"}</td>
                <td>{p.next_due_at ? new Date(p.next_due_at).toLocaleString() : "–"}</td>
                <td>
                  {(p.stale ?? []).length
                    ? (p.stale ?? []).map((s) => (
                        <div key={s.database} class="lvl-error">
                          {s.database || "instance"} since <Ago at={s.since} />
                        </div>
                      ))
                    : "–"}
                </td>
                {admin && (
                  <td>
                    <button type="button" onClick={() => setEditing(p.instance_id)} aria-label={`Edit the policy of ${p.instance_name}`}>
                      Edit
                    </button>
                  </td>
                )}
              </tr>
            ))}
          </Table>
          {res.data.length === 0 && <p class="muted">No database instances: add one under Databases first.</p>}
        </div>
      )}
      {editing && res.data && (
        <PolicyEditor
          key={editing}
          policy={res.data.find((p) => p.instance_id === editing)!}
          onDone={(saved) => {
            setEditing(null);
            if (saved) res.set((list) => (list ? list.map((p) => (p.instance_id === saved.instance_id ? saved : p)) : list));
          }}
        />
      )}
    </section>
  );
}

function PolicyEditor({ policy, onDone }: { policy: Policy; onDone: (p: Policy | null) => void }) {
  const [form, setForm] = useState<PolicyForm>({
    enabled: policy.enabled,
    every_hours: String(policy.every_hours),
    keep: String(policy.keep),
    databases: (policy.databases ?? []).join(", "),
    verify: policy.verify,
  });
  const [problem, setProblem] = useState<Problem | null>(null);
  const [busy, setBusy] = useState(false);
  const errs = fieldErrors(problem);
  const set = (p: Partial<PolicyForm>) => setForm((f) => ({ ...f, ...p }));
  const kv = /^(redis|valkey)$/.test(policy.engine);

  async function submit(e: Event) {
    e.preventDefault();
    setBusy(true);
    setProblem(null);
    try {
      const saved = await ok(
        api.PUT("/api/v1/backups/policies/{instance_id}", {
          params: { path: { instance_id: policy.instance_id } },
          body: policyBody(form) as Schemas["BackupPolicyInputBody"],
        }),
      );
      onDone(saved);
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setBusy(false);
    }
  }
  const described = (n: string) => (errs[n] ? n + "-error" : n + "-hint");
  return (
    <form class="card form" onSubmit={submit} aria-label={`Policy of ${policy.instance_name}`} noValidate>
      <h2>Policy of {policy.instance_name}</h2>
      <ProblemBox problem={problem} fields={["enabled", "every_hours", "keep", "databases", "verify"]} />
      <label class="check">
        <input type="checkbox" checked={form.enabled} onChange={(e) => set({ enabled: e.currentTarget.checked })} /> Back up on a schedule
      </label>
      <div class="grid2 tight">
        <Field label="Every (hours)" name="every_hours" errors={errs.every_hours} hint="1 to 168">
          <input id="every_hours" type="number" min={1} max={168} value={form.every_hours} aria-invalid={errs.every_hours ? true : undefined}
            aria-describedby={described("every_hours")} onInput={(e) => set({ every_hours: e.currentTarget.value })} />
        </Field>
        <Field label="Keep" name="keep" errors={errs.keep} hint="Backups per database, 1 to 365">
          <input id="keep" type="number" min={1} max={365} value={form.keep} aria-invalid={errs.keep ? true : undefined}
            aria-describedby={described("keep")} onInput={(e) => set({ keep: e.currentTarget.value })} />
        </Field>
      </div>
      {!kv && (
        <Field label="Databases" name="databases" errors={errs.databases} hint="Separated by commas; empty: the initial database.">
          <input id="databases" value={form.databases} aria-invalid={errs.databases ? true : undefined} aria-describedby={described("databases")}
            onInput={(e) => set({ databases: e.currentTarget.value })} />
        </Field>
      )}
      <label class="check">
        <input type="checkbox" checked={form.verify} onChange={(e) => set({ verify: e.currentTarget.checked })} /> Verify every backup
        (test-restore it)
      </label>
      <div class="row">
        <button type="submit" class="primary" disabled={busy}>
          Save the policy
        </button>
        <button type="button" onClick={() => onDone(null)}>
          Cancel
        </button>
      </div>
    </form>
  );
}

// Storage shows where backups go; administrators change it (secrets are
// write-only), connect or disconnect the cloud drive, and test the
// storage from a server, step by step, live.
export function Storage() {
  useTitle("Storage", "Backups");
  const admin = currentUser()?.admin ?? false;
  const settings = useResource(() => ok(api.GET("/api/v1/backups/settings")));
  const drive = useResource(async () => (admin ? ok(api.GET("/api/v1/backups/clouddrive")) : null));
  useLive([], (_d, type) => {
    if (type === "reset") {
      void settings.reload();
      void drive.reload();
    }
  });
  const s = settings.data;
  return (
    <section>
      <h1>Backups</h1>
      <BackupsNav at="storage" />
      <ProblemBox problem={settings.problem} />
      {!s && !settings.problem && <Loading what="the storage settings" />}
      {s && !admin && <SettingsView s={s} />}
      {s && admin && <SettingsForm s={s} driveConnected={!!drive.data?.connected} onSaved={(v) => settings.set(() => v)} />}
      {admin && drive.data && <CloudDrive status={drive.data} onChange={() => void drive.reload()} />}
      {admin && s?.configured && <StorageTest />}
    </section>
  );
}

type SettingsView = Schemas["SettingsView"];

function SettingsView({ s }: { s: SettingsView }) {
  return (
    <div class="card">
      <h2>Where backups go</h2>
      {!s.configured ? (
        <p class="muted">No storage is set: backups fail until an administrator sets one.</p>
      ) : s.provider === "clouddrive" ? (
        <p>
          The cloud drive, folder <strong>{s.folder}</strong>.
        </p>
      ) : (
        <dl class="facts">
          <dt>Endpoint</dt>
          <dd>
            {s.tls ? "https" : "http"}://{s.endpoint}
          </dd>
          <dt>Bucket</dt>
          <dd>{s.bucket}</dd>
          <dt>Prefix</dt>
          <dd>{s.prefix || "–"}</dd>
          <dt>Region</dt>
          <dd>{s.region}</dd>
        </dl>
      )}
    </div>
  );
}

function SettingsForm({ s, driveConnected, onSaved }: { s: SettingsView; driveConnected: boolean; onSaved: (v: SettingsView) => void }) {
  const [provider, setProvider] = useState<"s3" | "clouddrive">(s.provider ?? "s3");
  const [form, setForm] = useState<S3Form>({
    endpoint: s.endpoint,
    region: s.region,
    bucket: s.bucket,
    prefix: s.prefix,
    access_key_id: "",
    secret_access_key: "",
    path_style: s.path_style,
    tls: s.configured ? s.tls : true,
    ca: s.ca,
  });
  const [folder, setFolder] = useState(s.folder || "Capstan backups");
  const [problem, setProblem] = useState<Problem | null>(null);
  const [saved, setSaved] = useState(false);
  const [busy, setBusy] = useState(false);
  const errs = fieldErrors(problem);
  const set = (p: Partial<S3Form>) => setForm((f) => ({ ...f, ...p }));
  const fields = ["provider", "endpoint", "region", "bucket", "prefix", "access_key_id", "secret_access_key", "path_style", "tls", "ca", "folder"];

  async function submit(e: Event) {
    e.preventDefault();
    setBusy(true);
    setProblem(null);
    setSaved(false);
    try {
      const v = await ok(api.PUT("/api/v1/backups/settings", { body: settingsBody(provider, form, folder) as Schemas["BackupSettingsInputBody"] }));
      // The key pair is write-only: once stored, the fields empty.
      setForm((f) => ({ ...f, access_key_id: "", secret_access_key: "" }));
      setSaved(true);
      onSaved(v);
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setBusy(false);
    }
  }
  const inv = (n: string) => (errs[n] ? true : undefined);
  const desc = (n: string) => (errs[n] ? n + "-error" : n + "-hint");
  const secret = (isSet: boolean) => (isSet ? "Stored (never shown): leave empty to keep it." : "Not set.");
  return (
    <form class="card form wide" onSubmit={submit} aria-label="Storage settings" noValidate>
      <h2>Where backups go</h2>
      {!s.configured && <p class="muted">No storage is set yet: backups fail until one is.</p>}
      <ProblemBox problem={problem} fields={fields} />
      <fieldset class="modes">
        <legend>Provider</legend>
        <label class="check">
          <input type="radio" name="provider" checked={provider === "s3"} onChange={() => setProvider("s3")} /> S3-compatible bucket
        </label>
        <label class="check">
          <input type="radio" name="provider" checked={provider === "clouddrive"} onChange={() => setProvider("clouddrive")} /> Cloud drive
          folder
        </label>
      </fieldset>
      {errs.provider && (
        <small class="field-error" role="alert">
          {errs.provider.join("; ")}
        </small>
      )}
      {provider === "clouddrive" ? (
        <Field label="Folder" name="folder" errors={errs.folder}
          hint={driveConnected ? "In the drive's root; made when missing." : "Connect the drive below first: backups need it."}>
          <input id="folder" value={folder} aria-invalid={inv("folder")} aria-describedby={desc("folder")} onInput={(e) => setFolder(e.currentTarget.value)} />
        </Field>
      ) : (
        <>
          <div class="grid2 tight">
            <Field label="Endpoint" name="endpoint" errors={errs.endpoint} hint="host[:port], without https://">
              <input id="endpoint" value={form.endpoint} aria-invalid={inv("endpoint")} aria-describedby={desc("endpoint")}
                placeholder="s3.eu-central-1.amazonaws.com" onInput={(e) => set({ endpoint: e.currentTarget.value })} />
            </Field>
            <Field label="Region" name="region" errors={errs.region} hint="Empty: us-east-1">
              <input id="region" value={form.region} aria-invalid={inv("region")} aria-describedby={desc("region")}
                onInput={(e) => set({ region: e.currentTarget.value })} />
            </Field>
            <Field label="Bucket" name="bucket" errors={errs.bucket}>
              <input id="bucket" value={form.bucket} aria-invalid={inv("bucket")} onInput={(e) => set({ bucket: e.currentTarget.value })} />
            </Field>
            <Field label="Prefix" name="prefix" errors={errs.prefix} hint="A folder for every key; optional">
              <input id="prefix" value={form.prefix} aria-invalid={inv("prefix")} aria-describedby={desc("prefix")}
                onInput={(e) => set({ prefix: e.currentTarget.value })} />
            </Field>
            <Field label="Access key id" name="access_key_id" errors={errs.access_key_id} hint={secret(s.access_key_id_set)}>
              <input id="access_key_id" type="password" autoComplete="off" value={form.access_key_id} aria-invalid={inv("access_key_id")}
                aria-describedby={desc("access_key_id")} onInput={(e) => set({ access_key_id: e.currentTarget.value })} />
            </Field>
            <Field label="Secret access key" name="secret_access_key" errors={errs.secret_access_key} hint={secret(s.secret_access_key_set)}>
              <input id="secret_access_key" type="password" autoComplete="off" value={form.secret_access_key}
                aria-invalid={inv("secret_access_key")} aria-describedby={desc("secret_access_key")}
                onInput={(e) => set({ secret_access_key: e.currentTarget.value })} />
            </Field>
          </div>
          <div class="row wrap">
            <label class="check">
              <input type="checkbox" checked={form.tls} onChange={(e) => set({ tls: e.currentTarget.checked })} /> HTTPS
            </label>
            <label class="check">
              <input type="checkbox" checked={form.path_style} onChange={(e) => set({ path_style: e.currentTarget.checked })} /> Bucket in
              the path (most self-hosted services)
            </label>
          </div>
          <Field label="CA certificate (PEM)" name="ca" errors={errs.ca} hint="Optional: for a service whose certificate a private CA signed.">
            <textarea id="ca" rows={3} value={form.ca} aria-invalid={inv("ca")} aria-describedby={desc("ca")}
              onInput={(e) => set({ ca: e.currentTarget.value })} />
          </Field>
        </>
      )}
      <div class="row">
        <button type="submit" class="primary" disabled={busy}>
          Save the storage settings
        </button>
        {saved && (
          <span role="status" class="s-succeeded">
            Saved.
          </span>
        )}
      </div>
    </form>
  );
}

function CloudDrive({ status, onChange }: { status: Schemas["DriveStatus"]; onChange: () => void }) {
  const [problem, setProblem] = useState<Problem | null>(null);
  const confirm = useConfirm((force: boolean) => ({ title: "Disconnect the cloud drive", action: force ? "Forget" : "Disconnect", object: who,
    run: () => disconnect(force) }));
  const [note, setNote] = useState("");

  async function connect() {
    setProblem(null);
    try {
      const r = await ok(api.POST("/api/v1/backups/clouddrive/connect"));
      // The consent page returns to the control plane in this browser.
      location.assign(r.consent_url);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  async function disconnect(force: boolean) {
    setProblem(null);
    try {
      const r = await ok(api.DELETE("/api/v1/backups/clouddrive/connection", { params: { query: { force } } }));
      setNote(r.revoke_error ? `Forgotten, but not revoked: ${r.revoke_error}. Remove the access in the account's settings.` : r.message);
      onChange();
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  const who = status.account_email || "the connected account";
  return (
    <div class="card" aria-labelledby="drive-title">
      <h2 id="drive-title">Cloud drive</h2>
      <ProblemBox problem={problem} />
      {note && <p role="status">{note}</p>}
      {!status.configured ? (
        <p class="muted">No cloud drive client is configured on this control plane (capstan serve --clouddrive-client-id).</p>
      ) : status.connected ? (
        <>
          <p>
            <span class="badge s-succeeded">connected</span> <strong>{who}</strong>{" "}
            <span class="muted">since {status.connected_at ? new Date(status.connected_at).toLocaleString() : "–"}</span>
          </p>
          <div class="row wrap">
            <button type="button" class="danger" onClick={() => confirm.ask(false)}>
              Disconnect
            </button>
            {problem?.status === 502 && (
              <button type="button" class="danger" onClick={() => confirm.ask(true)}>
                Forget it without revoking
              </button>
            )}
          </div>
        </>
      ) : (
        <>
          <p>
            <span class="badge s-cancelled">not connected</span> Register <code>{status.redirect_uri}</code> with the OAuth client, then
            connect.
          </p>
          <button type="button" onClick={() => void connect()}>
            Connect a drive
          </button>
        </>
      )}
      {confirm.dialog}
    </div>
  );
}

function StorageTest() {
  const servers = useResource(async () => (await ok(api.GET("/api/v1/servers"))).servers ?? []);
  const [server, setServer] = useState("");
  const [problem, setProblem] = useState<Problem | null>(null);
  const follow = useJob();
  const errs = fieldErrors(problem);
  const data = follow.detail?.data as { steps?: StorageStep[]; bytes?: number } | undefined;
  const online = (servers.data ?? []).filter((s) => s.status !== "revoked");

  async function run(e: Event) {
    e.preventDefault();
    setProblem(null);
    try {
      const r = await ok(api.POST("/api/v1/backups/settings/test", { params: { query: { server_id: server } } }));
      follow.start(r.job);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  const running = follow.job && !finishedStates.includes(follow.job.status);
  return (
    <form class="card" onSubmit={run} aria-label="Test the storage" noValidate>
      <h2>Test the storage</h2>
      <p class="muted">A server writes a 256 KiB probe object, reads it back, lists it and deletes it.</p>
      <ProblemBox problem={problem} fields={["server_id"]} />
      <div class="row wrap end-items">
        <Field label="From server" name="server_id" errors={errs.server_id}>
          <select id="server_id" value={server} aria-invalid={errs.server_id ? true : undefined} onChange={(e) => setServer(e.currentTarget.value)}>
            <option value="">Choose…</option>
            {online.map((s) => (
              <option key={s.id} value={s.id}>
                {s.name} ({s.status})
              </option>
            ))}
          </select>
        </Field>
        <button type="submit" class="primary" disabled={!server || !!running}>
          Test the storage
        </button>
      </div>
      {follow.job && (
        <div class="scroll-x" aria-live="polite">
          <p>
            <StatusBadge status={follow.job.status} /> <Link href={"/jobs/" + follow.job.id}>job</Link>
          </p>
          <Table label="Storage test steps" columns={["Step", "Result", "Time"]}>
            {stepRows(data?.steps ?? liveSteps(follow.events)).map(({ step, result }) => (
              <tr key={step} data-step={step}>
                <td>{step}</td>
                <td class={result ? (result.ok ? "s-succeeded" : "lvl-error") : "muted"}>
                  {result ? (result.ok ? "ok" : "failed: " + (result.error ?? "")) : running ? "…" : "not run"}
                </td>
                <td>{result ? duration(result.duration_ms) : "–"}</td>
              </tr>
            ))}
          </Table>
          {follow.job.error && <p class="lvl-error">{follow.job.error}</p>}
        </div>
      )}
    </form>
  );
}

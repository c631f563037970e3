import { useState } from "preact/hooks";
import { api, ok } from "../../api/client";
import { Field, FilterSelect, Link, Loading, ProblemBox, StatusBadge, Table } from "../../components/ui";
import { currentUser } from "../../lib/auth";
import { busyWith, filterFromQuery, filterToQuery, runQuery, trackJobs, type RunFilter } from "../../lib/backups";
import { bytes } from "../../lib/format";
import { useLive } from "../../lib/live";
import { useAction } from "../../lib/action";
import { asProblem, type Problem } from "../../lib/problem";
import { useResource } from "../../lib/resource";
import { navigate, useLocation } from "../../lib/router";
import { Ago } from "../../components/Ago";
import { useTitle } from "../../lib/title";
import { BackupsNav, isBackupJob, JobProgress, useBackupJob, useInstances, Verified, type Instance, type Run } from "./shared";

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
        <FilterSelect id="f-instance" label="Instance" value={filter.instance_id} onChange={(v) => setFilter({ ...filter, instance_id: v })}
          options={[{ value: "", label: "Every instance" }, ...instances.list.map((i) => ({ value: i.id, label: i.name }))]} />
        <FilterSelect id="f-status" label="Status" value={filter.status} onChange={(v) => setFilter({ ...filter, status: v })}
          options={[{ value: "", label: "Any status" }, "queued", "running", "succeeded", "failed"]} />
        <FilterSelect id="f-verified" label="Verification" value={filter.verified} onChange={(v) => setFilter({ ...filter, verified: v })}
          options={[{ value: "", label: "Verified or not" }, { value: "true", label: "Verified" }, { value: "false", label: "Not verified" }]} />
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
  const { problem, busy, errs, handleSubmit } = useAction();
  const follow = useBackupJob(() => onQueued());
  const chosen = instances.find((i) => i.id === instance);
  const kv = chosen?.engine === "redis" || chosen?.engine === "valkey";

  const submit = handleSubmit(async () => {
    const body: { instance_id: string; database?: string } = { instance_id: instance };
    if (database.trim() && !kv) body.database = database.trim();
    const r = await ok(api.POST("/api/v1/backups/run", { body }));
    onQueued();
    follow.start(await ok(api.GET("/api/v1/backups/jobs/{job_id}", { params: { path: { job_id: r.job_id } } })));
  });

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

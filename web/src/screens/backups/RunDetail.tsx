import { useState } from "preact/hooks";
import { api, ok } from "../../api/client";
import { BackLink, Field, Link, Loading, ProblemBox, StatusBadge, Table, useConfirm } from "../../components/ui";
import { currentUser } from "../../lib/auth";
import { busyWith, trackJobs, verificationDetails } from "../../lib/backups";
import { bytes, duration } from "../../lib/format";
import { useLive } from "../../lib/live";
import { asProblem, fieldErrors, type Problem } from "../../lib/problem";
import { useResource } from "../../lib/resource";
import { useTitle } from "../../lib/title";
import { isBackupJob, JobProgress, useBackupJob, useInstances, Verified } from "./shared";

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
  const follow = useBackupJob(() => void res.reload());
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
          <BackLink href="/backups" label="Backups" />
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
      <BackLink href="/backups" label="Backups" />
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

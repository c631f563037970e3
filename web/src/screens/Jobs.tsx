import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { EventLine } from "../components/EventLine";
import { Link, Loading, ProblemBox, StatusBadge, useConfirm, Table } from "../components/ui";
import { currentUser } from "../lib/auth";
import { ago } from "../lib/format";
import { finishedStates, mergeEvents, upsertJob } from "../lib/jobs";
import { useLive } from "../lib/live";
import { asProblem, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";

type Job = Schemas["Job"];
type JobEvent = Schemas["Event"];

// Jobs lists the newest jobs and keeps the list current from the stream.
export function Jobs() {
  const res = useResource(async () => (await ok(api.GET("/api/v1/jobs", { params: { query: { limit: 100 } } }))).jobs ?? []);
  const { data: jobs, problem } = res;
  useLive(["job"], (data, type) => {
    if (type === "reset") void res.reload();
    else res.set((list) => (list ? upsertJob(list, data as Job) : list));
  });
  return (
    <section>
      <h1>Jobs</h1>
      <ProblemBox problem={problem} />
      {!jobs && !problem && <Loading what="jobs" />}
      {jobs && (
        <div class="card scroll-x">
          <Table label="Jobs" columns={["Job", "Status", "Server", "Created", "Finished"]}>
            {jobs.map((j) => (
              <tr key={j.id} data-job={j.id}>
                <td>
                  <Link href={"/jobs/" + j.id}>{j.type}</Link>
                </td>
                <td>
                  <StatusBadge status={j.status} />
                </td>
                <td>
                  <Link href={"/servers/" + j.server_id}>{j.server_id}</Link>
                </td>
                <td>{ago(j.created_at)}</td>
                <td>{j.finished_at ? ago(j.finished_at) : "–"}</td>
              </tr>
            ))}
          </Table>
          {jobs.length === 0 && <p class="muted">No jobs yet.</p>}
        </div>
      )}
    </section>
  );
}

// JobDetail shows a job with its events, live while it runs, and cancels
// it while it is queued.
export function JobDetail({ id }: { id: string }) {
  const res = useResource(() => ok(api.GET("/api/v1/jobs/{id}", { params: { path: { id } } })), [id]);
  const { data: job, reload: load, set: setJob } = res;
  const [actionProblem, setProblem] = useState<Problem | null>(null);
  const problem = actionProblem ?? res.problem;
  const confirm = useConfirm(() => ({ title: "Cancel the job", action: "Cancel", object: `${job?.type} ${job?.id}`, run: cancel }));
  useLive(
    ["job", "job.events"],
    (data, type) => {
      if (type === "reset") return void load();
      if (type === "job" && data?.id === id) {
        // A finished job's data and output come from the job itself.
        if (finishedStates.includes(data.status)) void load();
        else setJob((cur) => (cur ? { ...cur, ...data, events: cur.events } : cur));
      }
      if (type === "job.events" && data?.job_id === id) {
        setJob((cur) => (cur ? { ...cur, events: mergeEvents(cur.events ?? [], data.events as JobEvent[]) } : cur));
      }
    },
    [id],
  );

  async function cancel() {
    setProblem(null);
    try {
      await ok(api.POST("/api/v1/jobs/{id}/cancel", { params: { path: { id } } }));
      await load();
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  if (!job) return problem ? <ProblemBox problem={problem} /> : <Loading what="the job" />;
  return (
    <section>
      <p>
        <Link href="/jobs">← Jobs</Link>
      </p>
      <div class="row wrap">
        <h1>{job.type}</h1>
        <StatusBadge status={job.status} />
        {job.status === "queued" && currentUser()?.admin && (
          <button type="button" class="danger" onClick={() => confirm.ask(null)}>
            Cancel job
          </button>
        )}
      </div>
      <ProblemBox problem={problem} />
      <div class="card">
        <dl class="facts">
          <dt>Id</dt>
          <dd>
            <code>{job.id}</code>
          </dd>
          <dt>Server</dt>
          <dd>
            <Link href={"/servers/" + job.server_id}>{job.server_id}</Link>
          </dd>
          <dt>Created</dt>
          <dd>{new Date(job.created_at).toLocaleString()}</dd>
          <dt>Started</dt>
          <dd>{job.started_at ? new Date(job.started_at).toLocaleString() : "–"}</dd>
          <dt>Finished</dt>
          <dd>{job.finished_at ? new Date(job.finished_at).toLocaleString() : "–"}</dd>
          {job.error && (
            <>
              <dt>Error</dt>
              <dd class="lvl-error">{job.error}</dd>
            </>
          )}
        </dl>
        {job.redacted && <p class="muted">A member sees a job's metadata only: its events and output are for administrators.</p>}
      </div>
      {!job.redacted && (
        <>
          <h2>Events</h2>
          <div class="card log" aria-live="polite">
            {(job.events ?? []).length === 0 && <p class="muted">No events.</p>}
            {(job.events ?? []).map((e, i) => (
              <EventLine key={i} event={e} />
            ))}
          </div>
          {job.output != null && (
            <>
              <h2>Output</h2>
              <pre class="log">{typeof job.output === "string" ? job.output : JSON.stringify(job.output, null, 2)}</pre>
            </>
          )}
        </>
      )}
      {confirm.dialog}
    </section>
  );
}

import { useEffect, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { EventLine } from "../components/EventLine";
import { BackLink, CopyButton, Link, Loading, ProblemBox, StatusBadge, Table, useConfirm } from "../components/ui";
import { currentUser } from "../lib/auth";
import { Ago } from "../components/Ago";
import {
  actorLabel, finished, jobDuration, jobFilterQuery, matchesJobFilter, mergeEvents, parseJobFilter, upsertJob, withNames,
  type JobFilter,
} from "../lib/jobs";
import { useLive } from "../lib/live";
import { useJobLive } from "../lib/useJob";
import { asProblem, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import { navigate, useLocation } from "../lib/router";
import { useTitle } from "../lib/title";

type Job = Schemas["Job"];

const jobStates = ["queued", "running", "succeeded", "failed", "cancelled"];

// Named shows a name with its id on hover, or the id when no name is known.
export function Named({ name, id }: { name?: string | null; id: string }) {
  return name ? <span title={id}>{name}</span> : <code>{id}</code>;
}

// Jobs lists the newest jobs matching the filter in the page's query
// (server, application, type, state, actor), each with its target's
// names, and keeps the list current from the stream.
export function Jobs() {
  useTitle("Jobs");
  const { query } = useLocation();
  const filter = parseJobFilter(query);
  const key = jobFilterQuery(filter);
  const res = useResource(
    async () => (await ok(api.GET("/api/v1/jobs", { params: { query: { limit: 100, ...filter } } }))).jobs ?? [],
    [key],
  );
  const { data: jobs, problem } = res;
  // What the filters offer: the values seen in the lists loaded so far.
  const [seen, setSeen] = useState<{ servers: Map<string, string>; apps: Map<string, string>; types: Set<string> }>(() => ({
    servers: new Map(), apps: new Map(), types: new Set(),
  }));
  useEffect(() => {
    if (!jobs) return;
    setSeen((cur) => {
      const next = { servers: new Map(cur.servers), apps: new Map(cur.apps), types: new Set(cur.types) };
      for (const j of jobs) {
        next.servers.set(j.server_id, j.server_name || next.servers.get(j.server_id) || j.server_id);
        if (j.app_id) next.apps.set(j.app_id, j.app_name || next.apps.get(j.app_id) || j.app_id);
        next.types.add(j.type);
      }
      return next;
    });
  }, [jobs]);
  useLive(
    ["job"],
    (data, type) => {
      if (type === "reset") return void res.reload();
      res.set((list) => {
        if (!list) return list;
        const j = withNames(list, data as Job);
        if (!matchesJobFilter(j, filter)) return list.some((x) => x.id === j.id) ? list.filter((x) => x.id !== j.id) : list;
        return upsertJob(list, j);
      });
    },
    [key],
  );
  const set = (k: keyof JobFilter, v: string) => navigate("/jobs" + jobFilterQuery({ ...filter, [k]: v || undefined }));
  const options = (m: Map<string, string>, cur?: string) => {
    const entries = [...m.entries()];
    if (cur && !m.has(cur)) entries.push([cur, cur]);
    return entries.sort((a, b) => a[1].localeCompare(b[1]));
  };
  const types = [...new Set([...seen.types, ...(filter.type ? [filter.type] : [])])].sort();
  const [actor, setActor] = useState(filter.actor ?? "");
  useEffect(() => setActor(filter.actor ?? ""), [filter.actor]);
  return (
    <section>
      <h1>Jobs</h1>
      <form
        class="row wrap filters"
        aria-label="Filter jobs"
        onSubmit={(e) => {
          e.preventDefault();
          set("actor", actor.trim());
        }}
      >
        <FilterSelect label="Server" name="server_id" value={filter.server_id} options={options(seen.servers, filter.server_id)} onChange={set} />
        <FilterSelect label="App" name="app_id" value={filter.app_id} options={options(seen.apps, filter.app_id)} onChange={set} />
        <FilterSelect label="Type" name="type" value={filter.type} options={types.map((t) => [t, t])} onChange={set} />
        <FilterSelect label="State" name="status" value={filter.status} options={jobStates.map((t) => [t, t])} onChange={set} />
        <label>
          Actor{" "}
          <input
            name="actor"
            value={actor}
            placeholder="e-mail or system"
            onInput={(e) => setActor((e.target as HTMLInputElement).value)}
            onBlur={() => actor.trim() !== (filter.actor ?? "") && set("actor", actor.trim())}
          />
        </label>
        {key && (
          <Link href="/jobs" aria-label="Clear the filters">
            Clear filters
          </Link>
        )}
      </form>
      <ProblemBox problem={problem} />
      {!jobs && !problem && <Loading what="jobs" />}
      {jobs && (
        <div class="card scroll-x">
          <Table label="Jobs" columns={["Job", "Target", "Actor", "State", "Created", "Duration"]}>
            {jobs.map((j) => (
              <tr key={j.id} data-job={j.id}>
                <td>
                  <Link href={"/jobs/" + j.id}>{j.type}</Link>
                </td>
                <td data-target>
                  <Link href={"/servers/" + j.server_id}>
                    <Named name={j.server_name} id={j.server_id} />
                  </Link>
                  {j.app_id && (
                    <>
                      {" / "}
                      <Link href={"/applications/" + j.app_id}>
                        <Named name={j.app_name} id={j.app_id} />
                      </Link>
                    </>
                  )}
                </td>
                <td data-actor title={j.actor?.id ?? j.created_by}>
                  {actorLabel(j)}
                </td>
                <td>
                  <StatusBadge status={j.status} />
                </td>
                <td><Ago at={j.created_at} /></td>
                <td>{jobDuration(j)}</td>
              </tr>
            ))}
          </Table>
          {jobs.length === 0 && <p class="muted">{key ? "No jobs match these filters." : "No jobs yet."}</p>}
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
  useTitle(job?.type, "Jobs");
  const [actionProblem, setProblem] = useState<Problem | null>(null);
  const problem = actionProblem ?? res.problem;
  const confirm = useConfirm(() => ({ title: "Cancel the job", action: "Cancel", object: `${job?.type} ${job?.id}`, run: cancel }));
  useJobLive(id, {
    reset: () => void load(),
    job: (data) => {
      // A finished job's data and output come from the job itself.
      if (finished(data.status)) void load();
      else setJob((cur) => (cur ? { ...cur, ...data, server_name: cur.server_name, app_name: cur.app_name, actor: cur.actor, events: cur.events } : cur));
    },
    events: (events) => setJob((cur) => (cur ? { ...cur, events: mergeEvents(cur.events ?? [], events) } : cur)),
  });

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
      <BackLink href="/jobs" label="Jobs" />
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
            <code>{job.id}</code> <CopyButton text={job.id} label="Copy id" />
          </dd>
          <dt>Server</dt>
          <dd>
            <Link href={"/servers/" + job.server_id}>
              <Named name={job.server_name} id={job.server_id} />
            </Link>
          </dd>
          {job.app_id && (
            <>
              <dt>App</dt>
              <dd>
                <Link href={"/applications/" + job.app_id}>
                  <Named name={job.app_name} id={job.app_id} />
                </Link>
              </dd>
            </>
          )}
          <dt>Actor</dt>
          <dd title={job.actor?.id ?? job.created_by}>{actorLabel(job)}</dd>
          <dt>Duration</dt>
          <dd>{jobDuration(job)}</dd>
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

/** One of the job list's filters: a choice of values, "Any" for none. */
function FilterSelect(props: {
  label: string;
  name: keyof JobFilter;
  value?: string;
  options: [string, string][];
  onChange: (k: keyof JobFilter, v: string) => void;
}) {
  return (
    <label>
      {props.label}{" "}
      <select name={props.name} value={props.value ?? ""} onChange={(e) => props.onChange(props.name, (e.target as HTMLSelectElement).value)}>
        <option value="">Any</option>
        {props.options.map(([id, name]) => (
          <option key={id} value={id}>
            {name}
          </option>
        ))}
      </select>
    </label>
  );
}

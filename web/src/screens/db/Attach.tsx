import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../../api/client";
import { Field, Loading, ProblemBox } from "../../components/ui";
import { asProblem, fieldErrors, type Problem } from "../../lib/problem";
import { useResource } from "../../lib/resource";
import { JobLines } from "./JobLines";
import { useFollowed, type Instance } from "./run";

// Attach gives an application its own read-write login on the instance
// and puts the login's URL in the application's env, for its next
// deployment.
export function Attach({ inst, reload }: { inst: Instance; reload: () => Promise<void> }) {
  const apps = useResource(async () => (await ok(api.GET("/api/v1/applications"))).applications ?? []);
  const { jobs, follow } = useFollowed(() => void reload());
  const [problem, setProblem] = useState<Problem | null>(null);
  const [done, setDone] = useState<Schemas["AttachResult"] | null>(null);
  const errs = fieldErrors(problem);
  const sql = inst.kind === "sql";

  async function submit(e: Event) {
    e.preventDefault();
    const f = new FormData(e.currentTarget as HTMLFormElement);
    const s = (k: string) => String(f.get(k) ?? "").trim();
    setProblem(null);
    setDone(null);
    try {
      const r = await ok(
        api.POST("/api/v1/databases/{id}/attach", {
          params: { path: { id: inst.id } },
          body: { application_id: s("application_id"), env_key: s("env_key"), database: sql ? s("database") || undefined : undefined },
        }),
      );
      setDone(r);
      follow(r.job, `login ${r.username} for the application`);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  if (!apps.data) return apps.problem ? <ProblemBox problem={apps.problem} /> : <Loading what="applications" />;
  return (
    <div>
      <form class="card form" aria-label="Attach an application" onSubmit={submit} noValidate>
        <h2>Attach an application</h2>
        <p class="muted">
          The application gets its own read-write login; its URL goes into the application's env and is applied on its next deployment
          (nothing is redeployed now).
        </p>
        <ProblemBox problem={problem} fields={["application_id", "env_key", "database"]} />
        <Field label="Application" name="attach-app" errors={errs.application_id}>
          <select id="attach-app" name="application_id">
            {apps.data.map((a) => (
              <option key={a.id} value={a.id}>
                {a.name}
              </option>
            ))}
          </select>
        </Field>
        <Field label="Env key" name="attach-env" errors={errs.env_key} hint="The variable that holds the URL.">
          <input id="attach-env" name="env_key" defaultValue={sql ? "DATABASE_URL" : "REDIS_URL"} aria-invalid={errs.env_key ? true : undefined} />
        </Field>
        {sql && (
          <Field label="Database" name="attach-db" errors={errs.database}>
            <input id="attach-db" name="database" defaultValue={inst.database} aria-invalid={errs.database ? true : undefined} />
          </Field>
        )}
        <div>
          <button type="submit" class="primary" disabled={inst.state !== "ready" || apps.data.length === 0}>
            Attach
          </button>
        </div>
        {apps.data.length === 0 && <p class="muted">No applications yet.</p>}
      </form>
      {done && (
        <p role="status">
          Login <strong>{done.username}</strong> {done.key_pattern ? `for keys ${done.key_pattern}` : `on ${done.database}`}; {done.env_key} is set when
          its job succeeds.
        </p>
      )}
      <JobLines jobs={jobs} />
    </div>
  );
}

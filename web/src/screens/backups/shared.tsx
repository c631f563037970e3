import { useMemo } from "preact/hooks";
import { api, ok, type Schemas } from "../../api/client";
import { Link, StatusBadge, SubNav } from "../../components/ui";
import { verifiedLabels, verifiedState } from "../../lib/backups";
import { useResource } from "../../lib/resource";
import { useJob } from "../../lib/useJob";
import "../ops.css";

export type Run = Schemas["RunView"];
type Job = Schemas["Job"];
type JobEvent = Schemas["Event"];
export type Policy = Schemas["PolicyView"];
export type Instance = Schemas["Detail"];

export function BackupsNav({ at }: { at: "runs" | "policies" | "storage" }) {
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

export function isBackupJob(data: { type?: string } | null | undefined): boolean {
  return /^backup\./.test(data?.type ?? "");
}

// useInstances loads the database instances, for their names.
export function useInstances() {
  const res = useResource(async () => (await ok(api.GET("/api/v1/databases"))).databases ?? []);
  const names = useMemo(() => Object.fromEntries((res.data ?? []).map((i) => [i.id, i.name])) as Record<string, string>, [res.data]);
  return { list: res.data ?? [], names };
}

// useBackupJob follows one job live (see useJob); once it finished, it is
// read as the backups read it (its data and events).
export function useBackupJob(onFinished?: (j: Schemas["JobDetail"]) => void) {
  return useJob((id) => ok(api.GET("/api/v1/backups/jobs/{job_id}", { params: { path: { job_id: id } } })), onFinished);
}

export function JobProgress({ title, job, events }: { title: string; job: Job; events: JobEvent[] }) {
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

export function Verified({ run, busy }: { run: Run; busy: string }) {
  if (busy) return <span class="badge s-running">{busy}…</span>;
  const v = verifiedState(run);
  if (v === "none") return <span class="muted">–</span>;
  return (
    <span class={"badge v-" + v} title={run.verified ? new Date(run.verified.at).toLocaleString() : undefined}>
      {verifiedLabels[v]}
    </span>
  );
}

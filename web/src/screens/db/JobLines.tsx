import { Link, StatusBadge } from "../../components/ui";
import type { Followed } from "./run";

// JobLines shows jobs a screen started, live: status, error and events.
export function JobLines({ jobs, label = "Progress" }: { jobs: Followed[]; label?: string }) {
  if (!jobs.length) return null;
  return (
    <div class="card" aria-live="polite" aria-label={label} role="region">
      <ul class="joblist db-jobs">
        {jobs.map((j) => (
          <li key={j.id} data-job={j.id} data-status={j.status}>
            <StatusBadge status={j.status} /> {j.label} <Link href={"/jobs/" + j.id}>{j.type}</Link>
            {j.error && <div class="lvl-error">{j.error}</div>}
            {j.events.length > 0 && (
              <ul class="events">
                {j.events.map((e, i) => (
                  <li key={i} class={"lvl-" + e.level}>
                    <span class="muted">{new Date(e.at).toLocaleTimeString()}</span> {e.message}
                  </li>
                ))}
              </ul>
            )}
          </li>
        ))}
      </ul>
    </div>
  );
}

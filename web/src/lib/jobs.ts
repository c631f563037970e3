// upsertJob puts a job into a newest-first list: replaced where it is, or
// added at the top; the list keeps at most limit jobs.
export function upsertJob<T extends { id: string }>(list: T[], job: T, limit = 100): T[] {
  const i = list.findIndex((j) => j.id === job.id);
  if (i >= 0) {
    const next = list.slice();
    next[i] = job;
    return next;
  }
  return [job, ...list].slice(0, limit);
}

export const finishedStates = ["succeeded", "failed", "cancelled"];

// finished says whether a job in this status has ended.
export const finished = (status: string) => finishedStates.includes(status);

// mergeEvents adds events that arrived live to those loaded, by time and
// without repeating one already there: the same sequence number, or
// without one the same time, level and message. (A time read back from
// the store can be less precise than the same time sent live.)
export function mergeEvents<T extends { at: string; level: string; message: string; seq?: number }>(have: T[], more: T[]): T[] {
  const key = (e: T) => (e.seq != null ? `#${e.seq}` : `${Date.parse(e.at)}\u0000${e.level}\u0000${e.message}`);
  const seen = new Set(have.map(key));
  const out = have.slice();
  for (const e of more) if (!seen.has(key(e))) (seen.add(key(e)), out.push(e));
  return out.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
}

// JobFilter is what the jobs list shows: each field set must match. It
// lives in the page's query string, so a link reproduces the view.
export type JobFilter = { server_id?: string; app_id?: string; type?: string; status?: string; actor?: string };

export const jobFilterKeys = ["server_id", "app_id", "type", "status", "actor"] as const;

// parseJobFilter reads a filter from a query string, ignoring other keys
// and empty values.
export function parseJobFilter(query: URLSearchParams | string): JobFilter {
  const q = typeof query === "string" ? new URLSearchParams(query) : query;
  const f: JobFilter = {};
  for (const k of jobFilterKeys) {
    const v = q.get(k)?.trim();
    if (v) f[k] = v;
  }
  return f;
}

// jobFilterQuery is the query string of a filter ("" when it selects
// everything), its keys in a fixed order.
export function jobFilterQuery(f: JobFilter): string {
  const q = new URLSearchParams();
  for (const k of jobFilterKeys) if (f[k]) q.set(k, f[k]!);
  const s = q.toString();
  return s ? "?" + s : "";
}

type ListedJob = {
  id: string;
  server_id: string;
  server_name?: string;
  app_id?: string;
  app_name?: string;
  type: string;
  status: string;
  created_by?: string;
  actor?: { type: string; id?: string; email?: string } | null;
};

// matchesJobFilter says whether a job (one that arrived live) belongs in
// a list filtered by f. An actor given as an e-mail matches the job's
// actor e-mail when the job has one.
export function matchesJobFilter(j: ListedJob, f: JobFilter): boolean {
  if (f.server_id && j.server_id !== f.server_id) return false;
  if (f.app_id && j.app_id !== f.app_id) return false;
  if (f.type && j.type !== f.type) return false;
  if (f.status && j.status !== f.status) return false;
  if (f.actor) {
    const a = j.actor;
    if (f.actor === "system") return !j.created_by;
    if (f.actor.includes("@")) return !!a?.email && a.email.toLowerCase() === f.actor.toLowerCase();
    return j.created_by === f.actor;
  }
  return true;
}

// withNames fills in the names a live job lacks (the stream carries ids
// only) from the same job as listed before, or from other jobs of the
// list with the same server, application or creator.
export function withNames<T extends ListedJob>(list: T[], job: T): T {
  const out = { ...job };
  const prev = list.find((j) => j.id === job.id);
  const server = prev?.server_name ? prev : list.find((j) => j.server_id === job.server_id && j.server_name);
  if (!out.server_name && server) out.server_name = server.server_name;
  if (!out.app_name && out.app_id) {
    const app = list.find((j) => j.app_id === out.app_id && j.app_name);
    if (app) out.app_name = app.app_name;
  }
  if (out.actor?.type === "user" && !out.actor.email) {
    const by = list.find((j) => j.created_by === out.created_by && j.actor?.email);
    if (by) out.actor = { ...out.actor, email: by.actor!.email };
  }
  return out;
}

// actorLabel names who queued a job: the user's e-mail (or id when it is
// not known), "agent" or "system".
export function actorLabel(j: { created_by?: string; actor?: { type: string; id?: string; email?: string } | null }): string {
  const a = j.actor;
  if (!a) return j.created_by || "system";
  if (a.type === "user") return a.email || a.id || "user";
  return a.type;
}

// jobDuration is how long a job ran (from its start to its end, or to now
// while it runs), or how long it has waited while queued; "–" for a job
// that never started.
export function jobDuration(
  j: { status: string; created_at: string; started_at?: string | null; finished_at?: string | null },
  now = Date.now(),
): string {
  const start = j.started_at ? Date.parse(j.started_at) : null;
  if (start == null) return j.status === "queued" ? "waiting " + seconds(now - Date.parse(j.created_at)) : "–";
  const end = j.finished_at ? Date.parse(j.finished_at) : now;
  return seconds(end - start);
}

function seconds(ms: number): string {
  const s = Math.max(0, ms) / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// shortDigest shortens an image digest ("sha256:…") to its first 12 hex
// characters, for a label whose title carries the whole digest.
export function shortDigest(d: string): string {
  const hex = d.startsWith("sha256:") ? d.slice(7) : d;
  return hex.slice(0, 12);
}

// imageLabel is how an image reference reads: its tag (repository:tag),
// not its digest; a reference that is a digest only reads as the short
// digest.
export function imageLabel(ref: string): string {
  const at = ref.indexOf("@");
  const named = at >= 0 ? ref.slice(0, at) : ref;
  if (named && !/^sha256:/.test(named)) return named;
  return shortDigest(at >= 0 ? ref.slice(at + 1) : ref);
}

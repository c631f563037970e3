// The logic of the backup screens: how a run's state reads, the filters,
// the forms' bodies, and which backup jobs are under way per run.

export interface RunLike {
  status: string;
  delete_pending: boolean;
  verified: { ok: boolean; at: string } | null;
}

// verifiedState says where a backup stands on verification: "verified"
// (the last verification restored it), "verify-failed", "unverified" (a
// backup that succeeded but was never verified), or "none" (nothing to
// verify: it did not succeed).
export function verifiedState(r: RunLike): "verified" | "verify-failed" | "unverified" | "none" {
  if (r.status !== "succeeded") return "none";
  if (!r.verified) return "unverified";
  return r.verified.ok ? "verified" : "verify-failed";
}

export const verifiedLabels = { verified: "verified", "verify-failed": "verification failed", unverified: "not verified", none: "–" };

export interface RunFilter {
  instance_id: string;
  status: string;
  verified: string; // "", "true", "false"
}

// runQuery is the list's query for a filter: empty fields left out.
export interface RunQuery {
  limit: number;
  instance_id?: string;
  status?: "queued" | "running" | "succeeded" | "failed";
  verified?: "true" | "false";
  before?: string;
}

export function runQuery(f: RunFilter, limit = 50, before?: string): RunQuery {
  const q: RunQuery = { limit };
  if (f.instance_id) q.instance_id = f.instance_id;
  if (["queued", "running", "succeeded", "failed"].includes(f.status)) q.status = f.status as RunQuery["status"];
  if (f.verified === "true" || f.verified === "false") q.verified = f.verified;
  if (before) q.before = before;
  return q;
}

// filterFromQuery reads a filter from the page's address, so that a
// filtered list can be linked to.
export function filterFromQuery(q: URLSearchParams): RunFilter {
  return { instance_id: q.get("instance_id") ?? "", status: q.get("status") ?? "", verified: q.get("verified") ?? "" };
}

export function filterToQuery(f: RunFilter): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
  const s = q.toString();
  return s ? "?" + s : "";
}

// parseList reads a list typed into one field: comma- or space-separated,
// without empties or repeats.
export function parseList(s: string): string[] {
  return [...new Set(s.split(/[\s,]+/).map((x) => x.trim()).filter(Boolean))];
}

export interface S3Form {
  endpoint: string;
  region: string;
  bucket: string;
  prefix: string;
  access_key_id: string;
  secret_access_key: string;
  path_style: boolean;
  tls: boolean;
  ca: string;
}

// settingsBody is the PUT of the storage settings. The key pair is
// write-only: left empty, it is left out, and the stored one is kept
// (as long as the endpoint stays).
export function settingsBody(provider: "s3" | "clouddrive", s3: S3Form, folder: string): Record<string, unknown> {
  if (provider === "clouddrive") return { provider, folder: folder.trim(), tls: true };
  const body: Record<string, unknown> = {
    provider,
    endpoint: s3.endpoint.trim(),
    region: s3.region.trim(),
    bucket: s3.bucket.trim(),
    prefix: s3.prefix.trim(),
    path_style: s3.path_style,
    tls: s3.tls,
    ca: s3.ca.trim(),
  };
  if (s3.access_key_id.trim()) body.access_key_id = s3.access_key_id.trim();
  if (s3.secret_access_key) body.secret_access_key = s3.secret_access_key;
  return body;
}

export interface PolicyForm {
  enabled: boolean;
  every_hours: string;
  keep: string;
  databases: string;
  verify: boolean;
}

function num(s: string): number | string {
  const t = s.trim();
  return t !== "" && Number.isInteger(Number(t)) ? Number(t) : t;
}

// policyBody is the PUT of a policy; numbers that are not numbers go as
// typed, so that their field errors say what is wrong.
export function policyBody(f: PolicyForm): Record<string, unknown> {
  return { enabled: f.enabled, every_hours: num(f.every_hours), keep: num(f.keep), databases: parseList(f.databases), verify: f.verify };
}

export interface JobLike {
  id: string;
  type: string;
  status: string;
  payload?: unknown;
}

const finished = ["succeeded", "failed", "cancelled"];

// runOfJob is the backup run a backup job works on: the payload's run_id
// (verify, restore, delete, run).
export function runOfJob(j: JobLike): string {
  const p = j.payload as { run_id?: string } | null | undefined;
  return typeof p?.run_id === "string" ? p.run_id : "";
}

// trackJobs keeps, per run, the backup jobs under way on it (verify,
// restore, delete), from the stream's job messages.
export function trackJobs(cur: Record<string, Record<string, string>>, j: JobLike): Record<string, Record<string, string>> {
  const run = runOfJob(j);
  if (!run || !/^backup\.(verify|restore|delete)$/.test(j.type)) return cur;
  const jobsOfRun = { ...(cur[run] ?? {}) };
  if (finished.includes(j.status)) delete jobsOfRun[j.id];
  else jobsOfRun[j.id] = j.type;
  const next = { ...cur };
  if (Object.keys(jobsOfRun).length) next[run] = jobsOfRun;
  else delete next[run];
  return next;
}

// busyWith says what a run is busy with: "verifying", "restoring",
// "deleting" or "".
export function busyWith(jobsOfRun: Record<string, string> | undefined): string {
  const types = Object.values(jobsOfRun ?? {});
  if (types.includes("backup.delete")) return "deleting";
  if (types.includes("backup.restore")) return "restoring";
  if (types.includes("backup.verify")) return "verifying";
  return "";
}

export interface StorageStep {
  step: string;
  ok: boolean;
  duration_ms: number;
  error?: string;
}

export const storageSteps = ["write", "read", "list", "delete"];

// stepRows lists every step of a storage test in order, with the result
// of those that ran; the others are "not run".
export function stepRows(ran: StorageStep[] | null | undefined): { step: string; result: StorageStep | null }[] {
  const by = new Map((ran ?? []).map((s) => [s.step, s]));
  return storageSteps.map((step) => ({ step, result: by.get(step) ?? null }));
}

export interface ComparedTable {
  name: string;
  rows: number;
  want_rows: number;
  checksum: string;
  want_checksum: string;
  ok: boolean;
}

// verificationDetails reads a verification's details (its shape is the
// agent's): what was compared.
export function verificationDetails(d: unknown): {
  ok: boolean;
  bytes: number;
  checksum_ok: boolean;
  database: string;
  tables: ComparedTable[];
  error: string;
} {
  const o = (d && typeof d === "object" ? d : {}) as Record<string, unknown>;
  return {
    ok: o.ok === true,
    bytes: typeof o.bytes === "number" ? o.bytes : 0,
    checksum_ok: o.checksum_ok === true,
    database: typeof o.database === "string" ? o.database : "",
    tables: Array.isArray(o.tables) ? (o.tables as ComparedTable[]) : [],
    error: typeof o.error === "string" ? o.error : "",
  };
}

// liveSteps reads a storage test's steps from its live events ("write:
// ok in 12 ms", "read failed: …") until the job's data has them.
export function liveSteps(events: { message: string }[]): StorageStep[] {
  const out: StorageStep[] = [];
  for (const e of events) {
    const good = /^(\w+): ok in (\d+) ms$/.exec(e.message);
    if (good) out.push({ step: good[1], ok: true, duration_ms: Number(good[2]) });
    const bad = /^(\w+) failed: (.*)$/s.exec(e.message);
    if (bad) out.push({ step: bad[1], ok: false, duration_ms: 0, error: bad[2] });
  }
  return out;
}

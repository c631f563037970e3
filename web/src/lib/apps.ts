// The applications screens' own logic, kept free of Preact for the unit
// tests: the create request from the form, the env editor's change, how
// a release is named, and which stream messages concern an application.

export type Kind = "container" | "compose" | "service";
export type SourceType = "image" | "git" | "inline";

export interface KV {
  key: string;
  value: string;
}

// The create form's state: strings as the inputs hold them.
export interface AppForm {
  name: string;
  server_id: string;
  kind: Kind;
  source: SourceType;
  image: string;
  installation_id: string;
  repo_id: string;
  branch: string;
  dockerfile: string;
  build_context: string;
  build_args: KV[];
  build_secrets: KV[];
  compose: string;
  compose_file: string;
  web_service: string;
  start_command: string;
  build_command: string;
  build_timeout_seconds: string;
  container_port: string;
  health_path: string;
  memory_limit: string;
  // publish: "8081", "0.0.0.0:8081" or "[::1]:8081"; empty for none.
  publish: string;
  auto_deploy: boolean;
  deploy: boolean;
  env: KV[];
}

export function emptyForm(serverId = ""): AppForm {
  return {
    name: "", server_id: serverId, kind: "container", source: "image", image: "", installation_id: "", repo_id: "",
    branch: "", dockerfile: "", build_context: "", build_args: [], build_secrets: [], compose: "", compose_file: "", web_service: "",
    start_command: "", build_command: "", build_timeout_seconds: "", container_port: "", health_path: "", memory_limit: "",
    publish: "", auto_deploy: false, deploy: true, env: [],
  };
}

// sourcesOf lists the sources a kind takes: a service application is
// built from git; a compose one is inline or from git; a container one an
// image or git.
export function sourcesOf(kind: Kind): SourceType[] {
  if (kind === "service") return ["git"];
  if (kind === "compose") return ["inline", "git"];
  return ["image", "git"];
}

// withKind switches the form's kind, keeping its source when the kind
// takes it.
export function withKind(f: AppForm, kind: Kind): AppForm {
  const sources = sourcesOf(kind);
  return { ...f, kind, source: sources.includes(f.source) ? f.source : sources[0] };
}

// pairs keeps the rows of a key/value list that have a key.
export function pairs(rows: KV[]): KV[] {
  return rows.filter((r) => r.key.trim() !== "").map((r) => ({ key: r.key.trim(), value: r.value }));
}

// num reads a number input: undefined when empty, NaN kept so that the
// API names the field (a number it cannot read is refused there).
function num(s: string): number | undefined {
  return s.trim() === "" ? undefined : Number(s.trim());
}

export interface Publish {
  host_port: number;
  bind?: string;
}

// parsePublish reads a published port as the forms take it: a port
// ("8081", on 127.0.0.1), or bind:port ("0.0.0.0:8081", "[::1]:8081");
// undefined when empty. A port that is not a number is kept as NaN, which
// the API refuses naming the field.
export function parsePublish(s: string): Publish | undefined {
  const t = s.trim();
  if (t === "") return undefined;
  const i = t.lastIndexOf(":");
  if (i < 0 || (t.startsWith("[") === false && t.indexOf(":") !== i)) {
    // A port alone, or a bare IPv6 address without a port (refused by
    // the API as a port).
    return i < 0 ? { host_port: Number(t) } : { host_port: Number.NaN, bind: t };
  }
  let bind = t.slice(0, i);
  if (bind.startsWith("[") && bind.endsWith("]")) bind = bind.slice(1, -1);
  return { host_port: Number(t.slice(i + 1)), bind };
}

// publishText is a published port as the forms show it: bind:port.
export function publishText(p: Publish | null | undefined): string {
  if (!p) return "";
  const bind = p.bind || "127.0.0.1";
  return (bind.includes(":") ? "[" + bind + "]" : bind) + ":" + p.host_port;
}

// createBody is the POST /api/v1/applications body of the form: only the
// fields its kind and source use, and no empty optional field (the API's
// defaults apply).
export function createBody(f: AppForm): Record<string, unknown> {
  const b: Record<string, unknown> = { name: f.name.trim(), server_id: f.server_id, kind: f.kind, deploy: f.deploy };
  if (f.source === "image") b.source = { type: "image", image: f.image.trim() };
  else if (f.source === "inline") b.source = { type: "inline" };
  else {
    b.source = { type: "git", installation_id: num(f.installation_id), repo_id: num(f.repo_id), branch: f.branch };
    b.auto_deploy = f.auto_deploy;
  }
  if (f.kind !== "service") b.container_port = num(f.container_port);
  if (f.health_path.trim()) b.health_path = f.health_path.trim();
  if (f.memory_limit.trim()) b.memory_limit = f.memory_limit.trim();
  const publish = parsePublish(f.publish);
  if (publish) b.publish = publish;
  const env = pairs(f.env);
  if (env.length) b.env = env;
  if (f.kind === "compose") {
    b.web_service = f.web_service.trim();
    if (f.source === "inline") b.compose = f.compose;
    else if (f.compose_file.trim()) b.compose_file = f.compose_file.trim();
  }
  if (f.kind === "container" && f.source === "git") {
    if (f.dockerfile.trim()) b.dockerfile = f.dockerfile.trim();
    if (f.build_context.trim()) b.build_context = f.build_context.trim();
    const args = pairs(f.build_args);
    if (args.length) b.build_args = args;
    const secrets = pairs(f.build_secrets);
    if (secrets.length) b.build_secrets = secrets;
  }
  if (f.kind === "service") {
    b.start_command = f.start_command.trim();
    if (f.build_command.trim()) b.build_command = f.build_command.trim();
    const t = num(f.build_timeout_seconds);
    if (t !== undefined) b.build_timeout_seconds = t;
  }
  return b;
}

// The env editor: each variable as the API lists it (names only), with
// what the editor does to it.
export interface EnvRow {
  key: string;
  // existing: in the application's env now; new: added in the editor.
  existing: boolean;
  // value: the new value to set (write-only); null keeps the stored one.
  value: string | null;
  remove: boolean;
}

export function envRows(keys: string[]): EnvRow[] {
  return keys.map((key) => ({ key, existing: true, value: null, remove: false }));
}

// envChange is the PATCH /api/v1/applications/{id}/env body of the
// editor's rows: values to set (new rows and replaced values), keys to
// remove; null when nothing changes.
export function envChange(rows: EnvRow[]): { set: KV[]; remove: string[] } | null {
  const set: KV[] = [];
  const remove: string[] = [];
  for (const r of rows) {
    if (r.existing && r.remove) remove.push(r.key);
    else if (!r.existing && r.remove) continue;
    else if (!r.existing && r.key.trim() !== "") set.push({ key: r.key.trim(), value: r.value ?? "" });
    else if (r.existing && r.value !== null) set.push({ key: r.key, value: r.value });
  }
  return set.length || remove.length ? { set, remove } : null;
}

// envFieldErrors maps the API's errors of an env change (set[1].key,
// remove[0]) to the rows they name, by key, so that each shows next to
// its row.
export function envFieldErrors(
  errors: { field: string; message: string }[] | null | undefined,
  body: { set: KV[]; remove: string[] } | null,
): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const e of errors ?? []) {
    const m = e.field.replace(/^body\./, "").match(/^(set|remove)\[(\d+)\]/);
    const key = m && body ? (m[1] === "set" ? body.set[Number(m[2])]?.key : body.remove[Number(m[2])]) : undefined;
    (out[key ?? ""] ??= []).push(e.message);
  }
  return out;
}

export interface ReleaseLike {
  id: string;
  created_at: string;
  ref?: string;
  rollback_of?: string | null;
  spec: {
    image: string;
    git?: { commit_sha: string; repository: string; commit_message?: string } | null;
    service?: { release?: string } | null;
  };
}

// releaseName names what a deployment deployed, as a person recognises
// it: the commit of a git deployment, else the image reference.
export function releaseName(d: ReleaseLike): string {
  const g = d.spec.git;
  if (g?.commit_sha) return `${g.repository}@${g.commit_sha.slice(0, 7)}`;
  return d.ref || d.spec.image || d.id;
}

// rollbackObject is what the rollback confirmation names: the release
// and the deployment it came from.
export function rollbackObject(d: ReleaseLike): string {
  return `${releaseName(d)} (deployment ${d.id}, ${new Date(d.created_at).toLocaleString()})`;
}

export const deploymentDone = ["succeeded", "failed", "cancelled", "superseded"];

// concernsDeployment says whether a stream "job" message is about the
// deployment: its job, or (before the deployment has one) an app.deploy
// job whose payload names it.
export function concernsDeployment(job: any, d: { id: string; job_id: string | null }): boolean {
  if (!job) return false;
  if (d.job_id && job.id === d.job_id) return true;
  return job.type === "app.deploy" && job.payload?.deployment_id === d.id;
}

// concernsApp says whether a stream message may change what an
// application's screens show: an "event" of one of its deployments, or a
// "job" of its deploy, removal, proxy or domain work on its server.
export function concernsApp(type: string, data: any, app: { id: string; server_id: string }): boolean {
  if (!data) return false;
  if (type === "event") return data.payload?.application_id === app.id || data.subject?.id === app.id;
  if (type === "job") {
    if (data.server_id !== app.server_id) return false;
    if (data.payload?.app_id) return data.payload.app_id === app.id;
    return /^app\.(deploy|remove)$/.test(data.type);
  }
  return false;
}

// trafficSeries turns a traffic answer's points into chart columns.
export function trafficSeries(points: { t: string; count: number; status_2xx: number; status_3xx: number; status_4xx: number;
  status_5xx: number; bytes_out: number; p95_ms: number | null }[]) {
  return {
    t: points.map((p) => Date.parse(p.t) / 1000),
    requests: [
      { label: "All", values: points.map((p) => p.count) },
      { label: "2xx", values: points.map((p) => p.status_2xx) },
      { label: "4xx", values: points.map((p) => p.status_4xx) },
      { label: "5xx", values: points.map((p) => p.status_5xx) },
    ],
    p95: [{ label: "p95", values: points.map((p) => p.p95_ms) }],
    bytes: [{ label: "Bytes out", values: points.map((p) => p.bytes_out) }],
  };
}

// certLeft says how long a certificate has left, briefly.
export function certLeft(notAfter: string | null | undefined, now = Date.now()): string {
  if (!notAfter) return "no certificate";
  const ms = Date.parse(notAfter) - now;
  if (ms <= 0) return "expired";
  const days = Math.floor(ms / 86_400_000);
  return days === 0 ? `${Math.max(1, Math.floor(ms / 3_600_000))} h left` : `${days} d left`;
}

// The settings form's state: strings as the inputs hold them.
export interface SettingsForm {
  name: string;
  image: string;
  branch: string;
  container_port: string;
  health_path: string;
  memory_limit: string;
  publish: string;
  auto_deploy: boolean;
  compose: string;
  compose_file: string;
  web_service: string;
  dockerfile: string;
  build_context: string;
  start_command: string;
  build_command: string;
  build_timeout_seconds: string;
}

export interface AppSettings {
  name: string;
  kind: Kind;
  source: { type: SourceType; image?: string; installation_id?: number; repo_id?: number; branch?: string };
  container_port: number;
  health_path: string;
  memory_limit: string;
  publish?: Publish | null;
  auto_deploy: boolean;
  compose?: string;
  compose_file?: string;
  web_service?: string;
  dockerfile?: string;
  build_context?: string;
  service?: { start_command: string; build_command: string; build_timeout_seconds: number };
}

export function settingsForm(a: AppSettings): SettingsForm {
  return {
    name: a.name, image: a.source.image ?? "", branch: a.source.branch ?? "", container_port: a.container_port ? String(a.container_port) : "",
    health_path: a.health_path, memory_limit: a.memory_limit, publish: publishText(a.publish), auto_deploy: a.auto_deploy,
    compose: a.compose ?? "",
    compose_file: a.compose_file ?? "", web_service: a.web_service ?? "", dockerfile: a.dockerfile ?? "", build_context: a.build_context ?? "",
    start_command: a.service?.start_command ?? "", build_command: a.service?.build_command ?? "",
    build_timeout_seconds: a.service ? String(a.service.build_timeout_seconds) : "",
  };
}

// patchBody is the PATCH /api/v1/applications/{id} body of the settings
// form: the fields that changed, null when none did.
export function patchBody(a: AppSettings, f: SettingsForm): Record<string, unknown> | null {
  const was = settingsForm(a);
  const b: Record<string, unknown> = {};
  const str = (k: keyof SettingsForm, out: string = k) => {
    if (f[k] !== was[k]) b[out] = typeof f[k] === "string" ? (f[k] as string).trim() : f[k];
  };
  const int = (k: keyof SettingsForm) => {
    if (f[k] !== was[k]) b[k] = (f[k] as string).trim() === "" ? undefined : Number((f[k] as string).trim());
  };
  str("name");
  if (a.source.type === "image") str("image");
  if (a.source.type === "git" && f.branch !== was.branch) {
    b.source = { type: "git", installation_id: a.source.installation_id, repo_id: a.source.repo_id, branch: f.branch.trim() };
  }
  if (a.kind !== "service") int("container_port");
  str("health_path");
  str("memory_limit");
  // Emptied: host_port 0 unpublishes.
  if (f.publish.trim() !== was.publish) b.publish = parsePublish(f.publish) ?? { host_port: 0 };
  if (f.auto_deploy !== was.auto_deploy) b.auto_deploy = f.auto_deploy;
  if (a.kind === "compose") {
    if (a.source.type === "inline" && f.compose !== was.compose) b.compose = f.compose;
    if (a.source.type === "git") str("compose_file");
    str("web_service");
  }
  if (a.kind === "container" && a.source.type === "git") {
    str("dockerfile");
    str("build_context");
  }
  if (a.kind === "service") {
    str("start_command");
    str("build_command");
    int("build_timeout_seconds");
  }
  for (const k of Object.keys(b)) if (b[k] === undefined) delete b[k];
  return Object.keys(b).length ? b : null;
}

// The settings a release runs with, as far as the Overview shows them.
export interface ReleaseSettings {
  image?: string;
  container_port?: number;
  health_path?: string;
  memory_limit?: string;
}

export interface UnappliedSetting {
  label: string;
  live: string;
  set: string;
}

// unapplied lists the application's settings that its live release does
// not run with, when its latest deployment failed after an earlier one
// succeeded: what the Overview marks as not applied. An image that the
// live release got from a ref of its own is not counted.
export function unapplied(
  app: ReleaseSettings & { kind: string; source: { type: string } },
  live: { spec: ReleaseSettings; ref?: string } | null | undefined,
  latest: { id: string; status: string } | null | undefined,
  liveId: string | null | undefined,
): UnappliedSetting[] {
  if (!live || !latest || latest.status !== "failed" || latest.id === liveId) return [];
  const out: UnappliedSetting[] = [];
  const add = (label: string, set: string, was: string) => {
    if (set !== was) out.push({ label, live: was || "none", set: set || "none" });
  };
  const spec = live.spec;
  if (app.source.type === "image" && app.kind === "container" && !live.ref) add("Image", app.image ?? "", spec.image ?? "");
  if (app.kind !== "service") add("Port", String(app.container_port ?? ""), String(spec.container_port ?? ""));
  add("Health path", app.health_path ?? "", spec.health_path ?? "");
  add("Memory limit", app.memory_limit ?? "", spec.memory_limit ?? "");
  return out;
}

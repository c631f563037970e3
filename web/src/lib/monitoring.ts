// The logic of the monitoring screens: what a rule's form sends, how a
// rule and an alert read, and the alert filters.

export interface KindSpec {
  kind: string;
  subject: string;
  unit: string;
  min: number;
  max: number;
  scopes: string[] | null;
  default_threshold: number;
  default_duration: number;
  default_severity: string;
  condition: string;
}

export interface RuleLike {
  kind: string;
  scope: string;
  scope_id?: string;
  threshold: number;
  unit: string;
  duration: number;
}

export interface AlertLike {
  kind: string;
  severity: string;
  state: string;
  acknowledged_at: string | null;
  subject: { name: string; id: string; detail?: string };
}

export const severities = ["info", "warning", "critical"] as const;

export const kindLabels: Record<string, string> = {
  agent_offline: "Agent offline",
  cpu_high: "CPU high",
  memory_high: "Memory high",
  disk_high: "Disk high",
  inode_high: "Inodes high",
  swap_high: "Swap high",
  app_down: "Application down",
  tls_expiring: "Certificate expiring",
  backup_stale: "Backup stale",
};

export function kindLabel(kind: string): string {
  return kindLabels[kind] ?? kind;
}

export const scopeLabels: Record<string, string> = {
  all: "Everything",
  tag: "Servers with a tag",
  server: "One server",
  application: "One application",
  domain: "One domain",
  instance: "One database instance",
};

// unitText is a value in a kind's unit, as people write it.
export function unitText(value: number, unit: string): string {
  switch (unit) {
    case "percent":
      return `${value}%`;
    case "none":
      return "–";
    default:
      return `${value} ${value === 1 ? unit.replace(/s$/, "") : unit}`;
  }
}

// seconds is a rule's duration as people say it: "0 s", "90 s", "5 min",
// "2 h".
export function seconds(s: number): string {
  if (s === 0) return "at once";
  if (s % 3600 === 0) return `${s / 3600} h`;
  if (s % 60 === 0) return `${s / 60} min`;
  return `${s} s`;
}

// ruleCondition says what a rule watches: "CPU high ≥ 90% for 5 min".
export function ruleCondition(r: RuleLike): string {
  const label = kindLabel(r.kind);
  const hold = r.duration > 0 ? ` for ${seconds(r.duration)}` : "";
  switch (r.unit) {
    case "none":
      return label + hold;
    case "days":
      return `${label}: ${unitText(r.threshold, r.unit)} or less left${hold}`;
    case "minutes":
    case "hours":
      return `${label}: ${unitText(r.threshold, r.unit)} or more${hold}`;
    default:
      return `${label} ≥ ${unitText(r.threshold, r.unit)}${hold}`;
  }
}

// scopeText names what a rule covers, with the name of its scope's
// object when it is known (names: id → name).
export function scopeText(r: { scope: string; scope_id?: string }, names: Record<string, string> = {}): string {
  if (r.scope === "all" || !r.scope_id) return "Everything";
  if (r.scope === "tag") return `Servers tagged ${r.scope_id}`;
  return `${r.scope[0].toUpperCase() + r.scope.slice(1)} ${names[r.scope_id] ?? r.scope_id}`;
}

export interface RuleForm {
  kind: string;
  name: string;
  scope: string;
  scope_id: string;
  threshold: string;
  duration: string;
  severity: string;
  enabled: boolean;
}

// newRuleForm is the form of a new rule of a kind, with its defaults.
export function newRuleForm(spec: KindSpec): RuleForm {
  return {
    kind: spec.kind,
    name: "",
    scope: "all",
    scope_id: "",
    threshold: String(spec.default_threshold),
    duration: String(spec.default_duration),
    severity: spec.default_severity,
    enabled: true,
  };
}

// number reads a form's number; text that is not one goes to the API as
// it is, so that its field error says what is wrong with it.
function number(s: string): number | string {
  const t = s.trim();
  return t !== "" && Number.isFinite(Number(t)) ? Number(t) : t;
}

// createBody is what POST /api/v1/monitoring/rules gets from the form:
// empty fields are left out and take the kind's defaults.
export function createBody(f: RuleForm): Record<string, unknown> {
  const body: Record<string, unknown> = { kind: f.kind, scope: f.scope, severity: f.severity, enabled: f.enabled };
  if (f.name.trim()) body.name = f.name.trim();
  if (f.scope !== "all") body.scope_id = f.scope_id.trim();
  if (f.threshold.trim() !== "") body.threshold = number(f.threshold);
  if (f.duration.trim() !== "") body.duration = number(f.duration);
  return body;
}

// patchBody is what PATCH /api/v1/monitoring/rules/{id} gets: only what
// changed.
export function patchBody(
  rule: { name: string; threshold: number; duration: number; severity: string; enabled: boolean },
  f: RuleForm,
): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  if (f.name.trim() !== rule.name) body.name = f.name.trim();
  const th = number(f.threshold);
  if (th !== rule.threshold) body.threshold = th;
  const d = number(f.duration);
  if (d !== rule.duration) body.duration = d;
  if (f.severity !== rule.severity) body.severity = f.severity;
  if (f.enabled !== rule.enabled) body.enabled = f.enabled;
  return body;
}

export interface AlertFilter {
  severity: string; // "" for any
  kind: string; // "" for any
  text: string;
  unacknowledged: boolean;
}

// filterAlerts keeps the alerts that match the filter; text matches the
// subject's name, id or detail.
export function filterAlerts<T extends AlertLike>(list: T[], f: AlertFilter): T[] {
  const text = f.text.trim().toLowerCase();
  return list.filter(
    (a) =>
      (!f.severity || a.severity === f.severity) &&
      (!f.kind || a.kind === f.kind) &&
      (!f.unacknowledged || (a.state === "open" && !a.acknowledged_at)) &&
      (!text || [a.subject.name, a.subject.id, a.subject.detail ?? ""].some((s) => s.toLowerCase().includes(text))),
  );
}

// alertSubject names what an alert is about: "web-1 /var".
export function alertSubject(a: AlertLike): string {
  return a.subject.detail ? `${a.subject.name || a.subject.id} ${a.subject.detail}` : a.subject.name || a.subject.id;
}

// countOpen counts open alerts by severity.
export function countOpen(list: AlertLike[]): Record<string, number> {
  const out: Record<string, number> = { info: 0, warning: 0, critical: 0 };
  for (const a of list) if (a.state === "open") out[a.severity] = (out[a.severity] ?? 0) + 1;
  return out;
}

// The notifications, audit and platform screens' own logic, kept pure so
// that it is tested without a browser.

// The events a channel can receive (the API's catalogue).
export const eventTypes = [
  "deploy.succeeded",
  "deploy.failed",
  "server.enrolled",
  "server.revoked",
  "server.online",
  "server.offline",
  "alert.opened",
  "alert.resolved",
  "backup.failed",
  "backup.verify_failed",
  "backup.stale",
  "proxy.failed",
] as const;

export type ChannelKind = "team_chat" | "messenger" | "webhook";

export const channelKinds: { kind: ChannelKind; label: string; hint: string }[] = [
  { kind: "team_chat", label: "Team chat", hint: "A Slack-compatible incoming webhook" },
  { kind: "messenger", label: "Messenger", hint: "A Telegram-compatible bot" },
  { kind: "webhook", label: "Webhook", hint: "Any HTTPS endpoint, signed per Standard Webhooks" },
];

export interface ConfigField {
  name: "url" | "bot_token" | "chat_id" | "api_base_url";
  label: string;
  required: boolean;
  secret: boolean; // never shown back: the API says only that it is set
  hint?: string;
}

// configFields are the destination fields of a kind. Every field is
// write-only: the API never returns a channel's config.
export function configFields(kind: ChannelKind): ConfigField[] {
  switch (kind) {
    case "team_chat":
      return [{ name: "url", label: "Incoming-webhook URL", required: true, secret: true, hint: "https://…" }];
    case "webhook":
      return [{ name: "url", label: "Endpoint URL", required: true, secret: true, hint: "https://…" }];
    case "messenger":
      return [
        { name: "bot_token", label: "Bot token", required: true, secret: true },
        { name: "chat_id", label: "Chat id", required: true, secret: true },
        { name: "api_base_url", label: "Bot API base URL", required: false, secret: true, hint: "Default https://api.telegram.org" },
      ];
  }
}

// channelConfig builds a config of a kind from a form's values, leaving
// out what is empty; null when nothing was entered (an edit that keeps
// the destination).
export function channelConfig(kind: ChannelKind, values: Record<string, string>): Record<string, string> | null {
  const out: Record<string, string> = {};
  for (const f of configFields(kind)) {
    const v = (values[f.name] ?? "").trim();
    if (v) out[f.name] = v;
  }
  return Object.keys(out).length ? out : null;
}

export interface AuditFilter {
  actor: string;
  action: string;
  target_type: string;
  target_id: string;
  since: string; // a datetime-local value, in the browser's time zone
  until: string;
}

export const emptyAuditFilter: AuditFilter = { actor: "", action: "", target_type: "", target_id: "", since: "", until: "" };

// localToRFC3339 turns a datetime-local value ("2026-11-24T14:05") into
// an RFC 3339 time in UTC; "" for an empty or invalid value.
export function localToRFC3339(v: string): string {
  if (!v) return "";
  const t = new Date(v);
  return Number.isNaN(t.getTime()) ? "" : t.toISOString();
}

// auditQuery is the query of GET /api/v1/audit-logs for a filter: only
// the fields set, times in UTC.
export function auditQuery(f: AuditFilter, before?: string): Record<string, string> {
  const q: Record<string, string> = {};
  for (const k of ["actor", "action", "target_type", "target_id"] as const) {
    const v = f[k].trim();
    if (v) q[k] = v;
  }
  const since = localToRFC3339(f.since);
  const until = localToRFC3339(f.until);
  if (since) q.since = since;
  if (until) q.until = until;
  if (before) q.before = before;
  return q;
}

// filterFromURL and filterToURL keep the audit filter in the address.
export function filterFromURL(p: URLSearchParams): AuditFilter {
  const f = { ...emptyAuditFilter };
  for (const k of Object.keys(f) as (keyof AuditFilter)[]) f[k] = p.get(k) ?? "";
  return f;
}

export function filterToURL(f: AuditFilter): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v) p.set(k, v);
  const s = p.toString();
  return s ? "?" + s : "";
}

// agentSummary says how many enrolled servers run the newest agent
// version of those reported, and how many run older ones.
export function agentSummary(agents: { version: string; servers: number }[]): { newest: string; current: number; behind: number } {
  const known = agents.filter((a) => a.version);
  const newest = known[0]?.version ?? "";
  let current = 0;
  let behind = 0;
  for (const a of agents) {
    if (a.version === newest) current += a.servers;
    else behind += a.servers;
  }
  return { newest, current, behind };
}

// kitFileName is the recovery kit's file name from the answer's
// Content-Disposition, or a dated default.
export function kitFileName(disposition: string | null, now = new Date()): string {
  const m = /filename="?([^";]+)"?/.exec(disposition ?? "");
  if (m && /^[\w.-]+$/.test(m[1])) return m[1];
  return `capstan-recovery-kit-${now.toISOString().slice(0, 10)}.age`;
}

// Audit entries as sentences: "alice@example.com restarted container web
// on server web-1", from an entry's action, actor, target and details.

import { describeResource } from "./tokens";

export interface AuditEntryLike {
  action: string;
  // token_id and token_name name the API token a user acted through.
  actor: { type: string; id: string; email?: string; token_id?: string; token_name?: string };
  target: { type?: string; id?: string };
  details?: Record<string, unknown> | null;
  // The client that made the request, as "capstan-mcp/1.2.0".
  user_agent?: string;
}

// The clients that say who they are in their User-Agent: Capstan's own
// command line and its MCP server for assistants.
const clients: Record<string, string> = { "capstan-mcp": "an assistant (MCP)", "capstan-cli": "the command line" };

// Names the console knows for ids (servers, say), to write a name where
// the entry holds only an id.
export type Names = Record<string, string | undefined>;

type Ctx = {
  e: AuditEntryLike;
  d: Record<string, unknown>;
  who: string;
  names: Names;
  // the target, as "server web-1"; of names the noun used ("user").
  obj: (noun?: string, name?: unknown) => string;
  str: (k: string) => string;
};

const nouns: Record<string, string> = {
  server: "server",
  user: "user",
  session: "session",
  invitation: "invitation",
  application: "application",
  deployment: "deployment",
  database: "database instance",
  backup: "backup",
  backup_policy: "backup policy",
  notification_channel: "notification channel",
  monitoring_rule: "alert rule",
  rule: "alert rule",
  alert_rule: "alert rule",
  githost_installation: "git host installation",
  alert: "alert",
  domain: "domain",
  clouddrive: "cloud drive",
  githost_app: "git host app",
  token: "API token",
};

function s(v: unknown): string {
  return v == null ? "" : String(v);
}

function count(v: unknown, noun: string): string {
  const n = Number(v ?? 0);
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

function words(v: unknown): string {
  return s(v).replace(/[_.]/g, " ");
}

// verbs writes a server action's type as what was done: "restarted
// container", "read the log of unit".
const serverActions: Record<string, string> = {
  "agent.ping": "pinged the agent",
  "service.start": "started unit",
  "service.stop": "stopped unit",
  "service.restart": "restarted unit",
  "service.logs": "read the log of unit",
  "container.start": "started container",
  "container.stop": "stopped container",
  "container.restart": "restarted container",
  "container.logs": "read the log of container",
  "container.inspect": "inspected container",
};

// tokenGrant writes what a new token may do: "with scope deploy
// on application shop", with names for the ids it knows.
function tokenGrant(c: Ctx): string {
  const scopes = Array.isArray(c.d.scopes) ? c.d.scopes.map(s) : [];
  const resources = Array.isArray(c.d.resources) ? c.d.resources.map(s) : [];
  let out = scopes.length ? ` with scope${scopes.length === 1 ? "" : "s"} ${scopes.join(", ")}` : "";
  if (resources.length > 3) out += ` on ${resources.length} resources`;
  else if (resources.length) out += " on " + resources.map((r) => describeResource(r, c.names)).join(", ");
  // expires_at is null for a token that never expires (absent in older entries).
  if ("expires_at" in c.d && c.d.expires_at == null) out += ", never expiring";
  return out;
}

// tokenName is the name of the token an entry is about: the one acted
// through, else the one its details name, else its id.
function tokenName(c: Ctx): string {
  return c.e.actor.token_name || c.str("name") || c.e.target.id || "";
}

const pastControl: Record<string, string> = { start: "started", stop: "stopped", restart: "restarted" };

type Phrase = (c: Ctx) => string;

// The sentence of each action, after the actor: "{who} " + phrase.
const phrases: Record<string, Phrase> = {
  // Sign-in and sessions.
  "auth.login.succeeded": () => "signed in",
  "auth.login.failed": (c) => "failed to sign in" + (c.str("reason") ? ` (${words(c.d.reason)})` : ""),
  "auth.2fa.failed": () => "entered a wrong sign-in code",
  "auth.refresh.reused": () => "had their sessions ended: a used session token was sent again",
  "auth.logout": () => "signed out",
  "auth.session.revoked": (c) => (c.d.current ? "ended their current session" : "ended one of their sessions"),
  // Users.
  "user.created": (c) => `created ${c.obj("user", c.d.email)}${c.d.admin ? " as an administrator" : ""}`,
  "user.disabled": (c) => `disabled ${c.obj("user", c.d.email)}`,
  "user.2fa.reset": (c) => `reset the authenticator of ${c.obj("user", c.d.email)}`,
  "user.enabled": (c) => `enabled ${c.obj("user", c.d.email)}`,
  "user.role_changed": (c) => `made ${c.obj("user", c.d.email)} ${c.d.admin ? "an administrator" : "a member"}`,
  "user.deleted": (c) => `deleted ${c.obj("user", c.d.email)}`,
  "user.unlocked": (c) => `lifted the sign-in delay of ${c.obj("user", c.d.email)}`,
  "user.password.changed": (c) => (selfTarget(c.e) ? "changed their password" : `changed the password of ${c.obj("user", c.d.email)}`),
  "user.password.refused": (c) => "was refused a password change" + (c.str("reason") ? ` (${words(c.d.reason)})` : ""),
  "user.invited": (c) => `invited ${c.str("email") || c.e.target.id}${c.d.admin ? " as an administrator" : ""}`,
  "user.invitation_revoked": (c) => `revoked the invitation of ${c.str("email") || c.e.target.id}`,
  "user.invitation_accepted": (c) => `accepted an invitation and joined${c.d.admin ? " as an administrator" : ""}`,
  "platform.recovery_kit.downloaded": () => "downloaded the recovery kit",
  "platform.recovery_kit.refused": (c) => "was refused the recovery kit" + (c.str("reason") ? ` (${words(c.d.reason)})` : ""),
  // API tokens.
  "token.created": (c) => `created API token ${tokenName(c)}${tokenGrant(c)}`,
  "token.revoked": (c) => `revoked API token ${tokenName(c)}` + (c.str("owner") && c.str("owner") !== c.e.actor.email ? ` of ${c.str("owner")}` : ""),
  "token.new_address": (c) =>
    c.str("previous_ip") ? `used API token ${tokenName(c)} from a new address (last used from ${c.str("previous_ip")})` : `used API token ${tokenName(c)} for the first time`,
  "token.secrets_read": (c) => `read secrets with API token ${tokenName(c)}` + (c.str("operation") ? ` (${c.str("operation")})` : ""),
  // Servers.
  "server.enrollment.created": (c) => (c.d.reissued ? `issued a new enrollment for ${c.obj("server")}` : `created an enrollment for ${c.obj("server", c.d.name)}`),
  "server.enrolled": (c) => `enrolled ${c.obj("server")}` + (c.str("hostname") ? ` (host ${c.str("hostname")})` : ""),
  "server.revoked": (c) => `revoked ${c.obj("server")}`,
  "server.deleted": (c) => `deleted ${c.obj("server")}`,
  "server.action.queued": (c) => {
    const type = c.str("type");
    if (type === "docker.prune") {
      return c.d.dry_run
        ? `listed what a prune would remove on ${c.obj("server", c.d.server)}`
        : `pruned ${count(c.d.images, "image")} and ${count(c.d.networks, "network")} on ${c.obj("server", c.d.server)}`;
    }
    const what = c.str("container") || c.str("unit");
    const verb = serverActions[type] ?? `ran ${type || "an action"}`;
    return `${verb}${what ? " " + what : ""} on ${c.obj("server", c.d.server)}`;
  },
  "proxy.apply.queued": (c) => `applied the proxy configuration on ${c.obj("server")}`,
  // Applications and deployments.
  "application.created": (c) => `created ${c.obj("application", c.d.name)}`,
  "application.updated": (c) => `changed the settings of ${c.obj("application", c.d.name)}`,
  "application.deleted": (c) => `removed ${c.obj("application", c.d.name)}`,
  "application.removed": (c) => `finished removing ${c.obj("application", c.d.name)}`,
  "application.removal_failed": (c) => `could not remove ${c.obj("application", c.d.name)}` + (c.str("error") ? `: ${c.str("error")}` : ""),
  "application.env.read": (c) => `read the environment of ${c.obj("application", c.d.name)}`,
  "deployment.created": (c) => `deployed ${c.obj("application", c.d.name)}`,
  "deployment.rollback": (c) => `rolled back ${c.obj("application", c.d.name)}`,
  "deployment.cancelled": (c) => `cancelled a deployment of ${c.obj("application", c.d.name)}`,
  // Domains.
  "domain.created": (c) => `added domain ${c.str("hostname") || c.e.target.id}`,
  "domain.updated": (c) => `changed domain ${c.str("hostname") || c.e.target.id}`,
  "domain.deleted": (c) => `removed domain ${c.str("hostname") || c.e.target.id}`,
  "domain.check.queued": (c) => `checked domain ${c.str("hostname") || c.e.target.id}`,
  // Git hosts and cloud drives.
  "githost.app.connected": (c) => `connected the git host app ${c.str("slug") || c.e.target.id}`,
  "githost.app.disconnected": (c) => `disconnected the git host app ${c.str("slug") || c.e.target.id}`,
  "githost.installation.recorded": (c) => `installed the git host app on ${c.str("account") || c.e.target.id}`,
  "githost.installation.removed": (c) => `removed the git host app from ${c.str("account") || c.e.target.id}`,
  "clouddrive.connected": (c) => `connected the cloud drive ${[c.str("provider"), c.str("account_email")].filter(Boolean).join(" ") || c.e.target.id}`,
  "clouddrive.disconnected": (c) => `disconnected the cloud drive ${c.str("account_email") || c.e.target.id}`,
  // Databases.
  "database.registered": (c) => `registered ${c.obj("database", c.d.name)}`,
  "database.created": (c) => `created ${c.obj("database", c.d.name)}`,
  "database.tls.updated": (c) => `changed the TLS settings of ${c.obj("database", c.d.name)}`,
  "database.deleted": (c) => `deleted ${c.obj("database", c.d.name)}`,
  "database.removal.queued": (c) => `removed ${c.obj("database", c.d.name)}`,
  "database.removed": (c) => `finished removing ${c.obj("database", c.d.name)}`,
  "database.control.queued": (c) => `${pastControl[c.str("action")] ?? `ran ${c.str("action") || "an action"} on`} ${c.obj("database", c.d.name)}`,
  "database.connection.read": (c) => `read the connection details of ${c.obj("database", c.d.name)}`,
  "database.query.queued": (c) => `ran a query on ${c.obj("database", c.d.name)}`,
  "database.kv.queued": (c) => `ran ${c.str("action") || "a command"} on ${c.obj("database", c.d.name)}`,
  "database.attach": (c) => `attached an application to ${c.obj("database", c.d.name)}`,
  "database.database.create": (c) => `created database ${c.str("database")} on ${c.obj("database")}`,
  "database.database.drop": (c) => `dropped database ${c.str("database")} on ${c.obj("database")}`,
  "database.login.create": (c) => `created login ${c.str("username")} on ${c.obj("database")}`,
  "database.login.rotate": (c) => `rotated the password of login ${c.str("username")} on ${c.obj("database")}`,
  "database.login.drop": (c) => `dropped login ${c.str("username")} on ${c.obj("database")}`,
  "database.export.queued": (c) => `exported ${c.str("database") ? "database " + c.str("database") + " of " : ""}${c.obj("database")}`,
  "database.export.downloaded": (c) => `downloaded an export of ${c.obj("database")}`,
  "database.import.queued": (c) => `imported into ${c.str("database") ? "database " + c.str("database") + " of " : ""}${c.obj("database")}`,
  // Backups.
  "backup.run.queued": (c) => `started a backup of ${c.obj("database")}`,
  "backup.verify.queued": (c) => `verified ${c.obj("backup")}`,
  "backup.restore.queued": (c) => `restored ${c.obj("backup")}`,
  "backup.delete.queued": (c) => `deleted ${c.obj("backup")}`,
  "backup.pruned": (c) => `pruned ${c.obj("backup")}, past its policy's retention`,
  "backup.settings.updated": () => "changed the backup storage settings",
  "backup.settings.tested": (c) => "tested the backup storage" + (c.e.target.id ? ` from ${c.obj("server")}` : ""),
  "backup.policy.updated": (c) => `changed the backup policy of ${c.obj("database")}`,
  // Monitoring and notifications.
  "monitoring.rule.created": (c) => `created ${c.obj("rule", c.d.name)}`,
  "monitoring.rule.updated": (c) => `changed ${c.obj("rule", c.d.name)}`,
  "monitoring.rule.deleted": (c) => `deleted ${c.obj("rule", c.d.name)}`,
  "monitoring.alert.acknowledged": (c) => `acknowledged ${c.str("kind") ? words(c.d.kind) + " " : ""}${c.obj("alert")}`,
  "notification.channel.created": (c) => `created ${c.obj("notification_channel", c.d.name)}`,
  "notification.channel.updated": (c) => `changed ${c.obj("notification_channel", c.d.name)}`,
  "notification.channel.deleted": (c) => `deleted ${c.obj("notification_channel", c.d.name)}`,
  "notification.channel.secret_rotated": (c) => `rotated the signing secret of ${c.obj("notification_channel", c.d.name)}`,
};

// Actions whose sentence names the token acted through already.
const namesToken = new Set(["token.new_address", "token.secrets_read"]);

// describes says whether the action has a sentence of its own (others
// get a plain one naming the action).
export function describes(action: string): boolean {
  return action in phrases;
}

function selfTarget(e: AuditEntryLike): boolean {
  return !e.target.id || e.target.id === e.actor.id;
}

// actorName is who did it: a user's e-mail address, a server's agent, or
// Capstan itself.
export function actorName(e: AuditEntryLike, names: Names = {}): string {
  const a = e.actor;
  if (a.type === "agent") return `the agent of server ${names[a.id] || a.id}`;
  if (a.type === "system") return "Capstan";
  return a.email || a.id || "someone";
}

// auditSentence writes an entry as a sentence, with names for the ids it
// knows: "alice@example.com restarted container web on server web-1".
export function auditSentence(e: AuditEntryLike, names: Names = {}): string {
  const d = e.details ?? {};
  const who = actorName(e, names);
  const c: Ctx = {
    e,
    d,
    who,
    names,
    str: (k) => s(d[k]),
    obj: (type, name) => {
      const t = type ?? e.target.type ?? "";
      const noun = nouns[t] ?? words(t);
      const id = e.target.id ?? "";
      const shown = s(name) || names[id] || id;
      return [noun, shown].filter(Boolean).join(" ");
    },
  };
  const phrase = phrases[e.action];
  let out: string;
  // An agent enrolling names its server as the subject.
  if (e.action === "server.enrolled" && e.actor.type === "agent")
    out = `${c.obj("server", d.name)} enrolled` + (c.str("hostname") ? ` (host ${c.str("hostname")})` : "");
  else if (phrase) out = `${who} ${phrase(c)}`;
  else {
    const target = e.target.type || e.target.id ? ` on ${c.obj()}` : "";
    out = `${who}: ${e.action}${target}`;
  }
  // What a user did through an API token says which.
  const token = e.actor.token_name || e.actor.token_id;
  if (token && !namesToken.has(e.action)) out += ` via token ${token}`;
  const client = clients[(e.user_agent ?? "").split("/")[0]];
  if (client) out += ` through ${client}`;
  // A sentence starts with a capital, but for an e-mail address.
  return /^(the|server) /.test(out) ? out[0].toUpperCase() + out.slice(1) : out;
}

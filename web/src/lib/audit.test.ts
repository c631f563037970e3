import { describe, expect, it } from "vitest";
import { auditSentence, describes, type AuditEntryLike } from "./audit";

const alice = { type: "user", id: "usr_1", email: "alice@example.com" };
// alice, acting through her API token "ci".
const viaCI = { ...alice, token_id: "tok_1", token_name: "ci" };

function entry(action: string, target: AuditEntryLike["target"] = {}, details: Record<string, unknown> = {}, actor: AuditEntryLike["actor"] = alice): AuditEntryLike {
  return { action, actor, target, details };
}

// The actions the control plane records: the constants of
// internal/audit/audit.go and the Action… constants of the packages that
// record their own.
// The control plane's Go sources, read as text at test time.
const sources = import.meta.glob(["../../../internal/**/*.go", "!../../../internal/**/*_test.go"], { query: "?raw", import: "default", eager: true }) as Record<string, string>;

function recordedActions(): { auditGo: string[]; all: string[] } {
  const auditFile = Object.entries(sources).find(([p]) => p.endsWith("/internal/audit/audit.go"))?.[1] ?? "";
  const auditGo = [...auditFile.matchAll(/^\s+[A-Z]\w*\s+= "([a-z0-9_]+\.[a-z0-9_.]+)"/gm)].map((m) => m[1]);
  const all = new Set(auditGo);
  for (const text of Object.values(sources))
    for (const m of text.matchAll(/\bAction[A-Za-z]*\s+= "([a-z0-9_]+\.[a-z0-9_.]+)"/g)) all.add(m[1]);
  return { auditGo, all: [...all].sort() };
}

describe("audit sentences", () => {
  it("says what was done to what, where", () => {
    expect(auditSentence(entry("server.action.queued", { type: "server", id: "srv_1" },
      { type: "container.restart", container: "web", server: "web-1", job_id: "job_1" }))).toBe(
      "alice@example.com restarted container web on server web-1");
    expect(auditSentence(entry("server.action.queued", { type: "server", id: "srv_1" }, { type: "service.stop", unit: "nginx.service" }),
      { srv_1: "web-2" })).toBe("alice@example.com stopped unit nginx.service on server web-2");
    // An older entry without names: the ids.
    expect(auditSentence(entry("server.action.queued", { type: "server", id: "srv_1" }, { type: "agent.ping" }))).toBe(
      "alice@example.com pinged the agent on server srv_1");
    expect(auditSentence(entry("server.action.queued", { type: "server", id: "srv_1" },
      { type: "docker.prune", server: "web-1", dry_run: false, images: 3, networks: 1 }))).toBe(
      "alice@example.com pruned 3 images and 1 network on server web-1");
    expect(auditSentence(entry("server.action.queued", { type: "server", id: "srv_1" },
      { type: "docker.prune", server: "web-1", dry_run: true, images: 0, networks: 0 }))).toBe(
      "alice@example.com listed what a prune would remove on server web-1");
    expect(auditSentence(entry("server.action.queued", { type: "server", id: "srv_1" },
      { type: "container.inspect", server: "web-1", container: "db" }))).toBe(
      "alice@example.com inspected container db on server web-1");
  });

  it("writes each action of internal/audit/audit.go as a sentence", () => {
    const user = { type: "user", id: "usr_2" };
    const cases: [AuditEntryLike, string][] = [
      [entry("auth.login.succeeded", user), "alice@example.com signed in"],
      [entry("auth.login.failed", {}, { reason: "wrong_password" }), "alice@example.com failed to sign in (wrong password)"],
      [entry("auth.2fa.failed", user, { method: "totp" }), "alice@example.com entered a wrong sign-in code"],
      [entry("auth.refresh.reused", user), "alice@example.com had their sessions ended: a used session token was sent again"],
      [entry("auth.logout", user), "alice@example.com signed out"],
      [entry("auth.session.revoked", { type: "session", id: "ses_1" }, { current: false }), "alice@example.com ended one of their sessions"],
      [entry("user.created", user, { email: "bob@example.com", admin: true }), "alice@example.com created user bob@example.com as an administrator"],
      [entry("user.disabled", user), "alice@example.com disabled user usr_2"],
      [entry("user.2fa.reset", user, { sessions_revoked: 2 }), "alice@example.com reset the authenticator of user usr_2"],
      [entry("user.enabled", user, { email: "bob@example.com" }), "alice@example.com enabled user bob@example.com"],
      [entry("user.role_changed", user, { email: "bob@example.com", admin: false }), "alice@example.com made user bob@example.com a member"],
      [entry("user.deleted", user, { email: "bob@example.com" }), "alice@example.com deleted user bob@example.com"],
      [entry("user.unlocked", user, { email: "bob@example.com" }), "alice@example.com lifted the sign-in delay of user bob@example.com"],
      [entry("user.password.changed", { type: "user", id: "usr_1" }), "alice@example.com changed their password"],
      [entry("user.password.refused", { type: "user", id: "usr_1" }, { reason: "wrong_password" }),
        "alice@example.com was refused a password change (wrong password)"],
      [entry("user.invited", { type: "invitation", id: "inv_1" }, { email: "carol@example.com", admin: false, delivery: "email" }),
        "alice@example.com invited carol@example.com"],
      [entry("user.invitation_revoked", { type: "invitation", id: "inv_1" }, { email: "carol@example.com" }),
        "alice@example.com revoked the invitation of carol@example.com"],
      [entry("user.invitation_accepted", { type: "user", id: "usr_3" }, { email: "carol@example.com", admin: true },
        { type: "user", id: "usr_3", email: "carol@example.com" }), "carol@example.com accepted an invitation and joined as an administrator"],
      [entry("platform.recovery_kit.downloaded", { type: "platform" }), "alice@example.com downloaded the recovery kit"],
      [entry("platform.recovery_kit.refused", { type: "platform" }), "alice@example.com was refused the recovery kit"],
      [entry("token.created", { type: "token", id: "tok_1" }, { name: "ci", scopes: ["deploy"], resources: ["app:app_1"], expires_at: "2030-01-01T00:00:00Z" }),
        "alice@example.com created API token ci with scope deploy on application app_1"],
      [entry("token.revoked", { type: "token", id: "tok_1" }, { name: "ci", owner: "alice@example.com" }), "alice@example.com revoked API token ci"],
      [entry("token.new_address", { type: "token", id: "tok_1" }, { previous_ip: "192.0.2.1" }, viaCI),
        "alice@example.com used API token ci from a new address (last used from 192.0.2.1)"],
      [entry("token.secrets_read", { type: "token", id: "tok_1" }, { operation: "GET /api/v1/applications/app_1" }, viaCI),
        "alice@example.com read secrets with API token ci (GET /api/v1/applications/app_1)"],
    ];
    const { auditGo } = recordedActions();
    expect(auditGo.length).toBeGreaterThan(10);
    expect(new Set(cases.map(([e]) => e.action))).toEqual(new Set(auditGo));
    for (const [e, want] of cases) expect(auditSentence(e)).toBe(want);
  });

  it("has a sentence for every action the control plane records", () => {
    const { all } = recordedActions();
    expect(all.length).toBeGreaterThan(50);
    expect(all.filter((a) => !describes(a))).toEqual([]);
    for (const a of all) {
      const s = auditSentence(entry(a, { type: "server", id: "srv_1" }, { name: "x" }));
      expect(s).not.toContain("undefined");
      expect(s).not.toContain(a);
    }
  });

  it("names agents and the system", () => {
    expect(auditSentence(entry("server.enrolled", { type: "server", id: "srv_1" }, { hostname: "web-1.lan" }, { type: "agent", id: "srv_1" }),
      { srv_1: "web-1" })).toBe("Server web-1 enrolled (host web-1.lan)");
    expect(auditSentence(entry("application.removed", { type: "application", id: "app_1" }, { name: "shop" }, { type: "system", id: "" }))).toBe(
      "Capstan finished removing application shop");
    expect(auditSentence(entry("backup.pruned", { type: "backup", id: "bkr_1" }, {}, { type: "system", id: "scheduler" }))).toBe(
      "Capstan pruned backup bkr_1, past its policy's retention");
  });

  it("uses details and names for the objects", () => {
    expect(auditSentence(entry("notification.channel.created", { type: "notification_channel", id: "nch_1" }, { name: "ops", kind: "webhook" }))).toBe(
      "alice@example.com created notification channel ops");
    expect(auditSentence(entry("database.control.queued", { type: "database", id: "dbi_1" }, { action: "restart" }), { dbi_1: "main" })).toBe(
      "alice@example.com restarted database instance main");
    expect(auditSentence(entry("database.login.create", { type: "database", id: "dbi_1" }, { username: "app" }))).toBe(
      "alice@example.com created login app on database instance dbi_1");
    expect(auditSentence(entry("deployment.created", { type: "application", id: "app_1" }, { deployment_id: "dep_1" }), { app_1: "shop" })).toBe(
      "alice@example.com deployed application shop");
    expect(auditSentence(entry("domain.created", { type: "domain", id: "dom_1" }, { hostname: "shop.example.com" }))).toBe(
      "alice@example.com added domain shop.example.com");
  });

  it("says what API tokens were made and revoked, and how they were used", () => {
    const tok = { type: "token", id: "tok_1" };
    expect(auditSentence(entry("token.created", tok, { name: "ci", scopes: ["read", "deploy"], resources: ["app:app_1", "server-tag:prod"],
      expires_at: null }), { app_1: "shop" })).toBe("alice@example.com created API token ci with scopes read, deploy on application shop, servers tagged prod, never expiring");
    expect(auditSentence(entry("token.created", tok, { name: "ci", scopes: ["read"], resources: ["app:a", "app:b", "db:c", "server:d"],
      expires_at: "2030-01-01T00:00:00Z" }))).toBe("alice@example.com created API token ci with scope read on 4 resources");
    // An administrator revoking a member's token names its owner.
    expect(auditSentence(entry("token.revoked", tok, { name: "backup", owner: "bob@example.com" }))).toBe(
      "alice@example.com revoked API token backup of bob@example.com");
    // The first use has no previous address.
    expect(auditSentence(entry("token.new_address", tok, { previous_ip: "" }, viaCI))).toBe("alice@example.com used API token ci for the first time");
    expect(auditSentence(entry("token.secrets_read", tok, {}, viaCI))).toBe("alice@example.com read secrets with API token ci");
    // Without a name in the actor: the details' name, else the id.
    expect(auditSentence(entry("token.new_address", tok, { previous_ip: "" }))).toBe("alice@example.com used API token tok_1 for the first time");
  });

  it("says which API token a user acted through", () => {
    expect(auditSentence(entry("deployment.created", { type: "application", id: "app_1" }, { name: "shop" }, viaCI))).toBe(
      "alice@example.com deployed application shop via token ci");
    expect(auditSentence(entry("server.action.queued", { type: "server", id: "srv_1" }, { type: "container.restart", container: "web", server: "web-1" },
      { ...alice, token_id: "tok_9" }))).toBe("alice@example.com restarted container web on server web-1 via token tok_9");
    expect(auditSentence(entry("future.thing", { type: "widget", id: "w_1" }, {}, viaCI))).toBe("alice@example.com: future.thing on widget w_1 via token ci");
    // Capstan's own clients say which made the request.
    expect(auditSentence({ ...entry("deployment.created", { type: "application", id: "app_1" }, { name: "shop" }, viaCI), user_agent: "capstan-mcp/1.2.0" })).toBe(
      "alice@example.com deployed application shop via token ci through an assistant (MCP)");
    expect(auditSentence({ ...entry("deployment.created", { type: "application", id: "app_1" }, { name: "shop" }), user_agent: "capstan-cli/dev" })).toBe(
      "alice@example.com deployed application shop through the command line");
    expect(auditSentence({ ...entry("deployment.created", { type: "application", id: "app_1" }, { name: "shop" }), user_agent: "Mozilla/5.0" })).toBe(
      "alice@example.com deployed application shop");
    // A session's entry says nothing of tokens.
    expect(auditSentence(entry("deployment.created", { type: "application", id: "app_1" }, { name: "shop" }))).toBe(
      "alice@example.com deployed application shop");
  });

  it("says something plain of an action it does not know", () => {
    expect(auditSentence(entry("future.thing", { type: "widget", id: "w_1" }))).toBe("alice@example.com: future.thing on widget w_1");
    expect(describes("future.thing")).toBe(false);
  });
});

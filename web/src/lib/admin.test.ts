import { describe, expect, it } from "vitest";
import { agentSummary, auditQuery, channelConfig, configFields, emptyAuditFilter, filterFromURL, filterToURL, kitFileName, localToRFC3339 } from "./admin";
import { keyAction, shortcuts } from "./keys";

describe("channel config", () => {
  it("has the fields of each kind, all write-only", () => {
    expect(configFields("webhook").map((f) => f.name)).toEqual(["url"]);
    expect(configFields("messenger").map((f) => f.name)).toEqual(["bot_token", "chat_id", "api_base_url"]);
    expect(configFields("messenger").every((f) => f.secret)).toBe(true);
  });
  it("leaves out empty fields, and is null when nothing was entered", () => {
    expect(channelConfig("messenger", { bot_token: " 123:abc ", chat_id: "42", api_base_url: "" })).toEqual({ bot_token: "123:abc", chat_id: "42" });
    expect(channelConfig("webhook", { url: "", bot_token: "x" })).toBeNull();
  });
});

describe("audit filter", () => {
  it("sends only what is set, times in UTC", () => {
    const since = "2026-11-24T10:00";
    const q = auditQuery({ ...emptyAuditFilter, actor: " ann@example.com ", since }, "cur");
    expect(q).toEqual({ actor: "ann@example.com", since: new Date(since).toISOString(), before: "cur" });
    expect(auditQuery(emptyAuditFilter)).toEqual({});
  });
  it("ignores a time that is not one", () => {
    expect(localToRFC3339("yesterday")).toBe("");
    expect(localToRFC3339("")).toBe("");
  });
  it("round-trips through the address", () => {
    const f = { ...emptyAuditFilter, action: "auth.*", target_type: "server" };
    expect(filterToURL(f)).toBe("?action=auth.*&target_type=server");
    expect(filterFromURL(new URLSearchParams(filterToURL(f).slice(1)))).toEqual(f);
    expect(filterToURL(emptyAuditFilter)).toBe("");
  });
});

describe("platform", () => {
  it("counts servers on the newest agent and behind it", () => {
    expect(agentSummary([{ version: "1.3.0", servers: 5 }, { version: "1.2.0", servers: 2 }, { version: "", servers: 1 }])).toEqual({
      newest: "1.3.0",
      current: 5,
      behind: 3,
    });
    expect(agentSummary([])).toEqual({ newest: "", current: 0, behind: 0 });
  });
  it("names the kit from the answer, or by date", () => {
    expect(kitFileName('attachment; filename="capstan-recovery-kit-20261124-140000.age"')).toBe("capstan-recovery-kit-20261124-140000.age");
    expect(kitFileName('attachment; filename="../../etc/passwd"', new Date("2026-11-24T00:00:00Z"))).toBe("capstan-recovery-kit-2026-11-24.age");
    expect(kitFileName(null, new Date("2026-11-24T00:00:00Z"))).toBe("capstan-recovery-kit-2026-11-24.age");
  });
});

describe("shortcuts", () => {
  it("focuses the search on / and shows help on ?", () => {
    expect(keyAction("/", "")).toEqual({ kind: "search" });
    expect(keyAction("?", "")).toEqual({ kind: "help" });
  });
  it("goes to a screen on g and a letter, as the help lists", () => {
    expect(keyAction("g", "")).toEqual({ kind: "prefix" });
    for (const s of shortcuts.filter((x) => x.go)) expect(keyAction(s.keys.split(" ")[1], "g")).toEqual({ kind: "go", path: s.go });
    expect(keyAction("x", "g")).toBeNull();
  });
  it("does nothing while typing or with modifiers", () => {
    expect(keyAction("/", "", {}, true)).toBeNull();
    expect(keyAction("/", "", { ctrl: true })).toBeNull();
    expect(keyAction("s", "g", { meta: true })).toBeNull();
  });
});

import { describe, expect, it } from "vitest";
import {
  alertSubject,
  countOpen,
  createBody,
  filterAlerts,
  newRuleForm,
  patchBody,
  ruleCondition,
  scopeText,
  seconds,
  unitText,
} from "./monitoring";

const cpu = {
  kind: "cpu_high",
  subject: "server",
  unit: "percent",
  min: 1,
  max: 100,
  scopes: ["all", "tag", "server"],
  default_threshold: 90,
  default_duration: 300,
  default_severity: "warning",
  condition: "",
};

describe("monitoring", () => {
  it("says what a rule watches in its unit", () => {
    expect(ruleCondition({ kind: "cpu_high", scope: "all", threshold: 90, unit: "percent", duration: 300 })).toBe("CPU high ≥ 90% for 5 min");
    expect(ruleCondition({ kind: "tls_expiring", scope: "all", threshold: 14, unit: "days", duration: 0 })).toBe(
      "Certificate expiring: 14 days or less left",
    );
    expect(ruleCondition({ kind: "agent_offline", scope: "all", threshold: 1, unit: "minutes", duration: 0 })).toBe(
      "Agent offline: 1 minute or more",
    );
    expect(ruleCondition({ kind: "app_down", scope: "all", threshold: 0, unit: "none", duration: 120 })).toBe("Application down for 2 min");
    expect(unitText(5, "hours")).toBe("5 hours");
    expect(seconds(0)).toBe("at once");
    expect(seconds(90)).toBe("90 s");
    expect(seconds(7200)).toBe("2 h");
  });

  it("names a rule's scope with the object's name when known", () => {
    expect(scopeText({ scope: "all" })).toBe("Everything");
    expect(scopeText({ scope: "tag", scope_id: "db" })).toBe("Servers tagged db");
    expect(scopeText({ scope: "server", scope_id: "srv_1" }, { srv_1: "web-1" })).toBe("Server web-1");
    expect(scopeText({ scope: "instance", scope_id: "dbi_1" })).toBe("Instance dbi_1");
  });

  it("sends a new rule's fields, leaving out empty ones for the kind's defaults", () => {
    const f = newRuleForm(cpu);
    expect(createBody(f)).toEqual({ kind: "cpu_high", scope: "all", severity: "warning", enabled: true, threshold: 90, duration: 300 });
    expect(createBody({ ...f, name: " busy ", scope: "server", scope_id: "srv_1", threshold: "", duration: "" })).toEqual({
      kind: "cpu_high",
      name: "busy",
      scope: "server",
      scope_id: "srv_1",
      severity: "warning",
      enabled: true,
    });
    // Text that is not a number goes as it is, for the API's field error.
    expect(createBody({ ...f, threshold: "lots" }).threshold).toBe("lots");
  });

  it("patches only what changed", () => {
    const rule = { name: "cpu", threshold: 90, duration: 300, severity: "warning", enabled: true };
    const f = { ...newRuleForm(cpu), name: "cpu" };
    expect(patchBody(rule, f)).toEqual({});
    expect(patchBody(rule, { ...f, threshold: "75", enabled: false })).toEqual({ threshold: 75, enabled: false });
  });

  it("filters alerts by severity, kind, acknowledgement and subject", () => {
    const a = (kind: string, severity: string, name: string, acked = false, state = "open", detail?: string) => ({
      kind,
      severity,
      state,
      acknowledged_at: acked ? "2026-01-01T00:00:00Z" : null,
      subject: { id: "srv_" + name, name, detail },
    });
    const list = [a("cpu_high", "warning", "web-1"), a("disk_high", "critical", "db-1", true, "open", "/var"), a("cpu_high", "warning", "db-2", false, "resolved")];
    const none = { severity: "", kind: "", text: "", unacknowledged: false };
    expect(filterAlerts(list, none)).toHaveLength(3);
    expect(filterAlerts(list, { ...none, severity: "critical" }).map((x) => x.subject.name)).toEqual(["db-1"]);
    expect(filterAlerts(list, { ...none, kind: "cpu_high" })).toHaveLength(2);
    expect(filterAlerts(list, { ...none, unacknowledged: true }).map((x) => x.subject.name)).toEqual(["web-1"]);
    expect(filterAlerts(list, { ...none, text: "/VAR" }).map((x) => x.subject.name)).toEqual(["db-1"]);
    expect(alertSubject(list[1])).toBe("db-1 /var");
    expect(countOpen(list)).toEqual({ info: 0, warning: 1, critical: 1 });
  });
});

import { describe, expect, it } from "vitest";
import {
  busyWith,
  filterFromQuery,
  filterToQuery,
  liveSteps,
  parseList,
  policyBody,
  runQuery,
  settingsBody,
  stepRows,
  trackJobs,
  verificationDetails,
  verifiedState,
} from "./backups";

const s3 = {
  endpoint: " s3.example.com ",
  region: "eu",
  bucket: "b",
  prefix: "p",
  access_key_id: "",
  secret_access_key: "",
  path_style: true,
  tls: true,
  ca: "",
};

describe("backups", () => {
  it("says where a backup stands on verification", () => {
    expect(verifiedState({ status: "failed", delete_pending: false, verified: null })).toBe("none");
    expect(verifiedState({ status: "succeeded", delete_pending: false, verified: null })).toBe("unverified");
    expect(verifiedState({ status: "succeeded", delete_pending: false, verified: { ok: true, at: "" } })).toBe("verified");
    expect(verifiedState({ status: "succeeded", delete_pending: false, verified: { ok: false, at: "" } })).toBe("verify-failed");
  });

  it("builds the list's query and the page's address from a filter", () => {
    const f = { instance_id: "dbi_1", status: "", verified: "true" };
    expect(runQuery(f, 50, "bkr_9")).toEqual({ limit: 50, instance_id: "dbi_1", verified: "true", before: "bkr_9" });
    expect(filterToQuery(f)).toBe("?instance_id=dbi_1&verified=true");
    expect(filterFromQuery(new URLSearchParams("?status=failed"))).toEqual({ instance_id: "", status: "failed", verified: "" });
    expect(filterToQuery({ instance_id: "", status: "", verified: "" })).toBe("");
  });

  it("leaves write-only secrets out when they are not typed", () => {
    expect(settingsBody("s3", s3, "")).toEqual({
      provider: "s3",
      endpoint: "s3.example.com",
      region: "eu",
      bucket: "b",
      prefix: "p",
      path_style: true,
      tls: true,
      ca: "",
    });
    const typed = settingsBody("s3", { ...s3, access_key_id: "AK", secret_access_key: "sk " }, "");
    expect(typed.access_key_id).toBe("AK");
    expect(typed.secret_access_key).toBe("sk ");
    expect(settingsBody("clouddrive", s3, " Capstan ")).toEqual({ provider: "clouddrive", folder: "Capstan", tls: true });
  });

  it("reads a policy form", () => {
    expect(parseList("app, audit app  ")).toEqual(["app", "audit"]);
    expect(policyBody({ enabled: true, every_hours: "6", keep: "x", databases: "", verify: false })).toEqual({
      enabled: true,
      every_hours: 6,
      keep: "x",
      databases: [],
      verify: false,
    });
  });

  it("tracks the jobs under way on each run", () => {
    let m = trackJobs({}, { id: "j1", type: "backup.verify", status: "queued", payload: { run_id: "r1" } });
    expect(busyWith(m.r1)).toBe("verifying");
    m = trackJobs(m, { id: "j2", type: "backup.delete", status: "running", payload: { run_id: "r1" } });
    expect(busyWith(m.r1)).toBe("deleting");
    m = trackJobs(m, { id: "j2", type: "backup.delete", status: "failed", payload: { run_id: "r1" } });
    m = trackJobs(m, { id: "j1", type: "backup.verify", status: "succeeded", payload: { run_id: "r1" } });
    expect(m).toEqual({});
    // Other jobs change nothing.
    expect(trackJobs(m, { id: "j3", type: "container.restart", status: "queued", payload: { run_id: "r1" } })).toBe(m);
  });

  it("lists every storage step, run or not", () => {
    expect(stepRows([{ step: "write", ok: false, duration_ms: 41, error: "denied" }]).map((r) => [r.step, r.result?.ok ?? null])).toEqual([
      ["write", false],
      ["read", null],
      ["list", null],
      ["delete", null],
    ]);
  });

  it("reads the steps of a storage test from its live events", () => {
    const ev = (message: string) => ({ message });
    expect(liveSteps([ev("write: ok in 12 ms"), ev("something else"), ev("read failed: s3: NoSuchKey")])).toEqual([
      { step: "write", ok: true, duration_ms: 12 },
      { step: "read", ok: false, duration_ms: 0, error: "s3: NoSuchKey" },
    ]);
  });

  it("reads a verification's details whatever their shape", () => {
    expect(verificationDetails(null)).toEqual({ ok: false, bytes: 0, checksum_ok: false, database: "", tables: [], error: "" });
    const d = verificationDetails({ ok: true, bytes: 10, checksum_ok: true, database: "v", tables: [{ name: "t", ok: true }] });
    expect(d.ok && d.checksum_ok && d.tables.length === 1).toBe(true);
  });
});

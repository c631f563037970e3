import { describe, expect, it } from "vitest";
import { actorLabel, imageLabel, jobDuration, jobFilterQuery, matchesJobFilter, mergeEvents, parseJobFilter, upsertJob, withNames } from "./jobs";

describe("jobs", () => {
  it("replaces a job in place or adds it on top, keeping the limit", () => {
    const list = [{ id: "b", s: 1 }, { id: "a", s: 1 }];
    expect(upsertJob(list, { id: "a", s: 2 })).toEqual([{ id: "b", s: 1 }, { id: "a", s: 2 }]);
    expect(upsertJob(list, { id: "c", s: 1 }, 2)).toEqual([{ id: "c", s: 1 }, { id: "b", s: 1 }]);
  });
  it("merges live events without repeats, in time order", () => {
    const e = (at: string, message: string) => ({ at, level: "info", message });
    expect(mergeEvents([e("2026-01-01T00:00:01Z", "a")], [e("2026-01-01T00:00:00Z", "z"), e("2026-01-01T00:00:01Z", "a")]))
      .toEqual([e("2026-01-01T00:00:00Z", "z"), e("2026-01-01T00:00:01Z", "a")]);
  });
  it("knows an event again by its sequence number, or its time to the millisecond", () => {
    const live = { seq: 1, at: "2026-01-01T00:00:01.123456789Z", level: "info", message: "a" };
    const stored = { seq: 1, at: "2026-01-01T00:00:01.123456Z", level: "info", message: "a" };
    expect(mergeEvents([stored], [live])).toEqual([stored]);
    const { seq: _, ...noSeq } = live;
    const { seq: __, ...storedNoSeq } = stored;
    expect(mergeEvents([storedNoSeq], [noSeq])).toEqual([storedNoSeq]);
  });
});

describe("job list", () => {
  it("reads and writes its filter in the query string", () => {
    const f = parseJobFilter("?status=failed&type=app.deploy&x=1&actor=");
    expect(f).toEqual({ status: "failed", type: "app.deploy" });
    expect(jobFilterQuery(f)).toBe("?type=app.deploy&status=failed");
    expect(jobFilterQuery({})).toBe("");
    expect(parseJobFilter(jobFilterQuery({ actor: "ada@example.com", server_id: "srv_1" }))).toEqual({ actor: "ada@example.com", server_id: "srv_1" });
  });
  const job = {
    id: "job_2", server_id: "srv_1", type: "app.deploy", status: "running", app_id: "app_1", created_by: "usr_1",
    actor: { type: "user", id: "usr_1", email: "ada@example.com" },
  };
  it("knows whether a live job belongs in the filtered list", () => {
    expect(matchesJobFilter(job, {})).toBe(true);
    expect(matchesJobFilter(job, { server_id: "srv_1", type: "app.deploy", status: "running", app_id: "app_1" })).toBe(true);
    expect(matchesJobFilter(job, { status: "failed" })).toBe(false);
    expect(matchesJobFilter(job, { server_id: "srv_2" })).toBe(false);
    expect(matchesJobFilter(job, { actor: "ADA@example.com" })).toBe(true);
    expect(matchesJobFilter(job, { actor: "usr_1" })).toBe(true);
    expect(matchesJobFilter(job, { actor: "system" })).toBe(false);
    expect(matchesJobFilter({ ...job, created_by: "", actor: { type: "system" } }, { actor: "system" })).toBe(true);
  });
  it("fills in a live job's names from the list", () => {
    type J = Omit<typeof job, "actor"> & { server_name?: string; app_name?: string; actor: { type: string; id: string; email?: string } };
    const listed: J[] = [{ ...job, id: "job_1", server_name: "web-1", app_name: "shop" }];
    const live: J = { ...job, actor: { type: "user", id: "usr_1" } };
    const named = withNames(listed, live);
    expect([named.server_name, named.app_name, named.actor?.email]).toEqual(["web-1", "shop", "ada@example.com"]);
    expect(withNames([], live).server_name).toBeUndefined();
  });
  it("names the actor", () => {
    expect(actorLabel(job)).toBe("ada@example.com");
    expect(actorLabel({ created_by: "usr_9", actor: { type: "user", id: "usr_9" } })).toBe("usr_9");
    expect(actorLabel({ created_by: "", actor: { type: "system" } })).toBe("system");
    expect(actorLabel({ created_by: "srv_1", actor: { type: "agent", id: "srv_1" } })).toBe("agent");
  });
  it("says how long a job ran or waited", () => {
    const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
    const now = Date.parse(at(50));
    expect(jobDuration({ status: "succeeded", created_at: at(0), started_at: at(1), finished_at: at(4) }, now)).toBe("3.0 s");
    expect(jobDuration({ status: "running", created_at: at(0), started_at: at(5) }, now)).toBe("45 s");
    expect(jobDuration({ status: "queued", created_at: at(20) }, now)).toBe("waiting 30 s");
    expect(jobDuration({ status: "cancelled", created_at: at(0), finished_at: at(2) }, now)).toBe("–");
    expect(jobDuration({ status: "succeeded", created_at: at(0), started_at: at(0), finished_at: new Date(Date.UTC(2026, 0, 1, 1, 2, 0)).toISOString() }, now)).toBe("1 h 2 min");
  });
  it("reads an image by its tag, not its digest", () => {
    expect(imageLabel("nginx:1.27@sha256:0123456789abcdef0123")).toBe("nginx:1.27");
    expect(imageLabel("sha256:0123456789abcdef0123")).toBe("0123456789ab");
    expect(imageLabel("ghcr.io/a/b:v1")).toBe("ghcr.io/a/b:v1");
  });
});

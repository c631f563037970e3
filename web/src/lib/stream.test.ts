import { describe, expect, it, vi } from "vitest";

vi.mock("../api/client", () => ({ api: { POST: vi.fn() } }));
const { Stream, backoff } = await import("./stream");
const { serverStatusAfter } = await import("./live");

describe("stream", () => {
  it("hands messages to the handlers of their type and of *, and remembers the last id", () => {
    const s = new Stream(async () => "stk_x");
    const jobs: unknown[] = [];
    const all: string[] = [];
    s.on("job", (d) => jobs.push(d));
    const off = s.on("*", (_d, t) => all.push(t));
    s.dispatch("job", "17", '{"id":"job_1","status":"running"}');
    s.dispatch("event", "18", '{"type":"server.online"}');
    s.dispatch("job", "19", "not json");
    off();
    s.dispatch("job", "20", '{"id":"job_2"}');
    expect(jobs).toEqual([{ id: "job_1", status: "running" }, { id: "job_2" }]);
    expect(all).toEqual(["job", "event"]);
    expect((s as unknown as { lastId: string }).lastId).toBe("20");
  });
  it("backs off from half a second to 15 seconds", () => {
    expect([0, 1, 2, 3, 10].map(backoff)).toEqual([500, 1000, 2000, 4000, 15000]);
  });
  it("knows the server status each server event leads to", () => {
    expect(serverStatusAfter("server.enrolled")).toBe("online");
    expect(serverStatusAfter("server.offline")).toBe("offline");
    expect(serverStatusAfter("server.revoked")).toBe("revoked");
    expect(serverStatusAfter("alert.opened")).toBeNull();
  });
});

describe("jobs the stream reported", () => {
  it("keep the later state of a job", async () => {
    const { pickNewer } = await import("./live");
    const queued = { id: "job_1", status: "queued", error: null as string | null };
    expect(pickNewer(queued, { id: "job_1", status: "succeeded" }).status).toBe("succeeded");
    expect(pickNewer({ ...queued, status: "failed", error: "x" }, { status: "running" }).status).toBe("failed");
    expect(pickNewer(queued, undefined)).toBe(queued);
  });
});

import { describe, expect, it, vi } from "vitest";

vi.mock("../api/client", () => ({ api: { GET: vi.fn(), POST: vi.fn() }, ok: vi.fn() }));
const { JobFollow, routeJobMessage } = await import("./useJob");
const { stream } = await import("./stream");

const job = (id: string, status: string, more: Record<string, unknown> = {}) =>
  ({ id, status, type: "backup.run", server_id: "srv_1", error: null, data: null, payload: null, created_at: "2026-01-01T00:00:00Z", ...more }) as any;
const ev = (at: string, message: string, seq?: number) => ({ at, level: "info", message, seq }) as any;

// settle lets the reads a message started answer.
const settle = () => new Promise((r) => setTimeout(r, 0));

describe("routeJobMessage", () => {
  it("hands a job's messages to their handlers and ignores other jobs'", () => {
    const seen: string[] = [];
    const on = { job: (j: any) => seen.push("job " + j.status), events: (e: any[]) => seen.push("events " + e.length), reset: () => seen.push("reset") };
    routeJobMessage("job_1", "job", job("job_1", "running"), on);
    routeJobMessage("job_1", "job", job("job_2", "failed"), on);
    routeJobMessage("job_1", "job.events", { job_id: "job_1", events: [ev("2026-01-01T00:00:01Z", "a")] }, on);
    routeJobMessage("job_1", "job.events", { job_id: "job_2", events: [] }, on);
    routeJobMessage("job_1", "reset", null, on);
    routeJobMessage(undefined, "reset", null, on);
    routeJobMessage("job_1", "event", { id: "job_1" }, on);
    expect(seen).toEqual(["job running", "events 1", "reset"]);
  });
});

describe("JobFollow", () => {
  function follow(read: (id: string) => Promise<any>) {
    const finished: any[] = [];
    const f = new JobFollow<any>(read, () => {}, (d) => finished.push(d));
    return { f, finished };
  }

  it("keeps a job current from the stream, then reads it once it finished", async () => {
    const read = vi.fn(async (id: string) => job(id, "succeeded", { data: { ok: true }, events: [ev("2026-01-01T00:00:01Z", "a"), ev("2026-01-01T00:00:02Z", "b")] }));
    const { f, finished } = follow(read);
    f.start(job("job_a", "queued"));
    expect(f.state.job?.status).toBe("queued");
    f.message("job", { id: "job_a", status: "running" });
    f.message("job", { id: "job_other", status: "failed" });
    expect(f.state.job?.status).toBe("running");
    expect(f.state.job?.type).toBe("backup.run");
    f.message("job.events", { job_id: "job_a", events: [ev("2026-01-01T00:00:01Z", "a", 1)] });
    f.message("job.events", { job_id: "job_a", events: [ev("2026-01-01T00:00:01Z", "a", 1)] });
    expect(f.state.events.map((e) => e.message)).toEqual(["a"]);
    expect(read).not.toHaveBeenCalled();
    f.message("job", { id: "job_a", status: "succeeded" });
    await settle();
    expect(read).toHaveBeenCalledWith("job_a");
    expect(f.state.detail?.data).toEqual({ ok: true });
    expect(f.state.events.map((e) => e.message)).toEqual(["a", "b"]);
    expect(finished.map((d) => d.id)).toEqual(["job_a"]);
  });

  it("reads at once a job the stream already reported finished", async () => {
    stream.dispatch("job", "", JSON.stringify({ id: "job_fast", status: "failed", error: "boom" }));
    const read = vi.fn(async (id: string) => job(id, "failed", { error: "boom" }));
    const { f, finished } = follow(read);
    f.start(job("job_fast", "queued"));
    expect(f.state.job?.status).toBe("failed");
    await settle();
    expect(read).toHaveBeenCalledTimes(1);
    expect(finished).toHaveLength(1);
  });

  it("reads the job again after a reset, and keeps what it has when the read fails", async () => {
    const read = vi.fn(async () => {
      throw new Error("down");
    });
    const { f, finished } = follow(read);
    f.message("reset", null);
    expect(read).not.toHaveBeenCalled();
    f.start(job("job_r", "running"));
    f.message("job.events", { job_id: "job_r", events: [ev("2026-01-01T00:00:01Z", "a")] });
    f.message("reset", null);
    await settle();
    expect(read).toHaveBeenCalledWith("job_r");
    expect(f.state.job?.status).toBe("running");
    expect(f.state.events).toHaveLength(1);
    expect(f.state.detail).toBeNull();
    expect(finished).toHaveLength(0);
  });

  it("forgets the job on clear", () => {
    const { f } = follow(async (id) => job(id, "succeeded"));
    f.start(job("job_c", "running"));
    f.message("job.events", { job_id: "job_c", events: [ev("2026-01-01T00:00:01Z", "a")] });
    f.clear();
    expect(f.state).toEqual({ job: null, events: [], detail: null });
    f.message("job", { id: "job_c", status: "running" });
    expect(f.state.job).toBeNull();
  });
});

import { describe, expect, it } from "vitest";
import { awaitJob, cellText, Changes, errorAt, kvRows, memoryLimit, numericType, offsetOf, ttlText, type JobResult } from "./db";

describe("errorAt", () => {
  it("marks the word the engine points at", () => {
    expect(errorAt("SELECT * FROM nope", 15)).toEqual({ before: "SELECT * FROM ", at: "nope", after: "" });
    expect(errorAt("SELECT 1 +", 10)).toEqual({ before: "SELECT 1 ", at: "+", after: "" });
  });
  it("counts characters, not UTF-16 units", () => {
    const sql = "SELECT '😀', nope";
    expect(errorAt(sql, 13)).toEqual({ before: "SELECT '😀', ", at: "nope", after: "" });
    expect(offsetOf(sql, 13)).toBe("SELECT '😀', ".length);
  });
  it("has nothing to mark without a position inside the statement", () => {
    expect(errorAt("SELECT 1", 0)).toBeNull();
    expect(errorAt("SELECT 1", undefined)).toBeNull();
    expect(errorAt("SELECT 1", 99)).toBeNull();
  });
});

describe("cells", () => {
  it("reads values by their JSON type", () => {
    expect(cellText(null)).toBe("NULL");
    expect(cellText(1.5)).toBe("1.5");
    expect(cellText(false)).toBe("false");
    expect(cellText("x")).toBe("x");
    expect(cellText({ a: 1 })).toBe('{"a":1}');
    expect(cellText({ $base64: "AAECAw==" })).toBe("(binary, 4 bytes)");
  });
  it("aligns numeric types", () => {
    expect(numericType("int4")).toBe(true);
    expect(numericType("NUMERIC")).toBe(true);
    expect(numericType("text")).toBe(false);
    expect(numericType("interval")).toBe(false);
    expect(numericType("BIGINT UNSIGNED")).toBe(true);
  });
});

describe("keys", () => {
  it("says how long a key lives", () => {
    expect(ttlText(-1)).toBe("no expiry");
    expect(ttlText(-2)).toBe("gone");
    expect(ttlText(42)).toBe("42 s");
    expect(ttlText(3725)).toBe("1 h 2 min");
  });
  it("shows every type as a table", () => {
    const base = { key: "k", ttl_seconds: -1, size: 2, truncated: false };
    expect(kvRows({ ...base, type: "hash", hash: { b: "2", a: "1" } }).rows).toEqual([["a", "1"], ["b", "2"]]);
    expect(kvRows({ ...base, type: "list", list: ["x", "y"] }).rows).toEqual([["0", "x"], ["1", "y"]]);
    expect(kvRows({ ...base, type: "zset", zset: [{ member: "m", score: 2 }] })).toEqual({ columns: ["Member", "Score"], rows: [["m", "2"]] });
    expect(kvRows({ ...base, type: "stream", stream: [{ id: "1-0", fields: { a: "b" } }] }).rows).toEqual([["1-0", "a=b"]]);
    expect(kvRows({ ...base, type: "string", string: "v" }).rows).toEqual([["v"]]);
  });
});

describe("memoryLimit", () => {
  it("reads MiB as bytes", () => {
    expect(memoryLimit("")).toBeUndefined();
    expect(memoryLimit("512")).toBe(536870912);
    expect(memoryLimit("lots")).toBeNaN();
  });
});

describe("awaitJob", () => {
  const job = (status: JobResult["status"]): JobResult => ({ job_id: "j", status, error: null, data: null });
  it("reads again only after the stream said the job changed", async () => {
    const answers = [job("running"), job("running"), job("succeeded")];
    const changes = new Changes();
    let reads = 0;
    const p = awaitJob(async () => answers[reads++], () => changes.next());
    await Promise.resolve();
    await Promise.resolve();
    expect(reads).toBe(1);
    changes.notify();
    await new Promise((r) => setTimeout(r, 0));
    expect(reads).toBe(2);
    changes.notify();
    expect((await p)?.status).toBe("succeeded");
    expect(reads).toBe(3);
  });
  it("keeps a change that came before the wait", async () => {
    const c = new Changes();
    c.notify();
    await c.next(); // resolves at once
  });
  it("stops when told", async () => {
    const c = new Changes();
    let stop = false;
    const p = awaitJob(async () => job("running"), () => c.next(), () => stop);
    stop = true;
    c.notify();
    expect(await p).toBeNull();
  });
});

import { describe, expect, it } from "vitest";
import { Batches, sparkPoints } from "./spark";

describe("sparklines", () => {
  it("scales percentages into the box and averages buckets", () => {
    expect(sparkPoints([0, 100], 10, 10)).toBe("0.0,10.0 10.0,0.0");
    expect(sparkPoints([0, 0, 100, 100], 10, 10, 2)).toBe("0.0,10.0 10.0,0.0");
    expect(sparkPoints([50, null, 50, 150], 10, 10, 3)).toBe("0.0,5.0 5.0,5.0 10.0,0.0");
    expect(sparkPoints([null, 5], 10, 10)).toBe("");
  });
  it("loads keys in batches, one batch at a time, each key once", async () => {
    const batches: string[][] = [];
    let running = 0;
    let peak = 0;
    let settled: () => void = () => {};
    const all = new Promise<void>((r) => (settled = r));
    const b = new Batches<number>(
      2,
      async (keys) => {
        batches.push(keys);
        running++;
        peak = Math.max(peak, running);
        await new Promise((r) => setTimeout(r, 1));
        running--;
        if (keys.includes("bad")) throw new Error("no");
        return new Map(keys.filter((k) => k !== "gone").map((k) => [k, k.length]));
      },
      () => {
        if (b.done.size === 5) settled();
      },
    );
    b.want(["a", "bb", "gone"]);
    b.want(["a", "bad", "ccc"]);
    await all;
    expect(batches).toEqual([["a", "bb"], ["gone", "bad"], ["ccc"]]);
    expect(peak).toBe(1);
    expect(b.done.get("bb")).toBe(2);
    expect(b.done.get("gone")).toBeNull();
    expect(b.done.get("bad")).toBeNull();
    expect(b.done.get("ccc")).toBe(3);
  });
});

import { describe, expect, it } from "vitest";
import { Pool, sparkPoints } from "./spark";

describe("sparklines", () => {
  it("scales percentages into the box and averages buckets", () => {
    expect(sparkPoints([0, 100], 10, 10)).toBe("0.0,10.0 10.0,0.0");
    expect(sparkPoints([0, 0, 100, 100], 10, 10, 2)).toBe("0.0,10.0 10.0,0.0");
    expect(sparkPoints([50, null, 50, 150], 10, 10, 3)).toBe("0.0,5.0 5.0,5.0 10.0,0.0");
    expect(sparkPoints([null, 5], 10, 10)).toBe("");
  });
  it("loads each key once, at most limit at a time", async () => {
    let running = 0;
    let peak = 0;
    const loads: string[] = [];
    let resolveAll: () => void = () => {};
    const finished = new Promise<void>((r) => (resolveAll = r));
    const pool = new Pool<number>(2, async (k) => {
      loads.push(k);
      running++;
      peak = Math.max(peak, running);
      await Promise.resolve();
      running--;
      return k.length;
    }, () => {
      if (pool.done.size === 5) resolveAll();
    });
    pool.want(["a", "bb", "ccc"]);
    pool.want(["a", "dddd", "eeeee"]);
    await finished;
    expect(loads.sort()).toEqual(["a", "bb", "ccc", "dddd", "eeeee"]);
    expect(peak).toBeLessThanOrEqual(2);
    expect(pool.done.get("ccc")).toBe(3);
  });
});

import { describe, expect, it } from "vitest";
import { Loads } from "./resource";

describe("Loads", () => {
  it("keeps the newest load's answer when an older one answers last", async () => {
    const seen: unknown[] = [];
    const loads = new Loads<string>((r) => r.data !== undefined && seen.push(r.data));
    let slow!: (v: string) => void;
    const first = loads.run(() => new Promise((res) => (slow = res)));
    await loads.run(async () => "new");
    slow("old");
    await first;
    expect(seen).toEqual(["new"]);
  });

  it("reports a failed load as a problem", async () => {
    let last: any;
    const loads = new Loads<string>((r) => (last = r));
    await loads.run(async () => {
      throw new Error("down");
    });
    expect(last.loading).toBe(false);
    expect(last.problem.detail).toBe("down");
  });

  it("answers nothing after stop", async () => {
    const seen: unknown[] = [];
    const loads = new Loads<string>((r) => r.data !== undefined && seen.push(r.data));
    let slow!: (v: string) => void;
    const p = loads.run(() => new Promise((res) => (slow = res)));
    loads.stop();
    slow("late");
    await p;
    expect(seen).toEqual([]);
  });
});

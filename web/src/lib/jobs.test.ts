import { describe, expect, it } from "vitest";
import { mergeEvents, upsertJob } from "./jobs";

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

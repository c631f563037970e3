import { describe, expect, it } from "vitest";
import { filterLines, lineText } from "./logs";

const l = (priority: number, message: string) => ({ at: "2026-01-01T00:00:00Z", priority, message });

describe("log lines", () => {
  const lines = [l(6, "GET /health 200"), l(3, "Database connection refused"), l(4, "slow GET /orders"), l(7, "debug tick")];
  it("keeps every line with no filter", () => {
    expect(filterLines(lines, "", null)).toEqual(lines);
  });
  it("filters by every word of the text, ignoring case", () => {
    expect(filterLines(lines, "get", null).map((x) => x.message)).toEqual(["GET /health 200", "slow GET /orders"]);
    expect(filterLines(lines, "  GET   orders ", null).map((x) => x.message)).toEqual(["slow GET /orders"]);
    expect(filterLines(lines, "nothing", null)).toEqual([]);
  });
  it("keeps lines of a priority or more urgent", () => {
    expect(filterLines(lines, "", 4).map((x) => x.priority)).toEqual([3, 4]);
    expect(filterLines(lines, "", 0)).toEqual([]);
    expect(filterLines(lines, "slow", 3)).toEqual([]);
  });
  it("shows time, priority and message", () => {
    expect(lineText(l(3, "boom"), () => "12:00:00")).toBe("12:00:00  err      boom");
  });
});

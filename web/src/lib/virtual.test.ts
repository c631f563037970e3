import { describe, expect, it } from "vitest";
import { visibleRange } from "./virtual";

describe("visibleRange", () => {
  it("renders the rows in view plus overscan", () => {
    expect(visibleRange(10_000, 44, 0, 440, 5)).toEqual({ start: 0, end: 16 });
    expect(visibleRange(10_000, 44, 44 * 100, 440, 5)).toEqual({ start: 95, end: 116 });
  });
  it("stays within the list at its end and for empty lists", () => {
    expect(visibleRange(10_000, 44, 44 * 10_000, 440, 5)).toEqual({ start: 9995, end: 10_000 });
    expect(visibleRange(0, 44, 0, 440)).toEqual({ start: 0, end: 0 });
    expect(visibleRange(3, 44, -50, 440)).toEqual({ start: 0, end: 3 });
  });
});

import { describe, expect, it, vi } from "vitest";
import { Clock } from "./clock";
import { ago } from "./format";

describe("clock", () => {
  it("runs one timer for any number of listeners, and none without", () => {
    vi.useFakeTimers();
    try {
      const set = vi.fn((fn: () => void, ms: number) => setInterval(fn, ms));
      const c = new Clock(1000, { set, clear: (t) => clearInterval(t as ReturnType<typeof setInterval>) });
      expect(c.running).toBe(false);
      const seen: number[] = [];
      const offs = Array.from({ length: 500 }, (_, i) => c.subscribe(() => i === 0 && seen.push(1)));
      expect(set).toHaveBeenCalledTimes(1);
      expect(c.listening).toBe(500);
      vi.advanceTimersByTime(3000);
      expect(seen.length).toBe(3);
      offs.forEach((off) => off());
      expect(c.running).toBe(false);
      vi.advanceTimersByTime(3000);
      expect(seen.length).toBe(3);
      // Listening again starts it again.
      const off = c.subscribe(() => seen.push(2));
      expect(set).toHaveBeenCalledTimes(2);
      vi.advanceTimersByTime(1000);
      expect(seen.at(-1)).toBe(2);
      off();
    } finally {
      vi.useRealTimers();
    }
  });
  it("starts the real timers as plain functions", () => {
    // Browsers refuse setInterval called as a method of another object.
    const real = globalThis.setInterval;
    let self: unknown = "unset";
    globalThis.setInterval = function (this: unknown, ...args: Parameters<typeof setInterval>) {
      self = this;
      return real(...args);
    } as typeof setInterval;
    try {
      const off = new Clock().subscribe(() => {});
      expect(self).toBeUndefined();
      off();
    } finally {
      globalThis.setInterval = real;
    }
  });
  it("keeps a relative time fresh", () => {
    const c = new Clock();
    const started = Date.parse("2026-12-02T10:00:00Z");
    let text = ago(started, started);
    const off = c.subscribe((now) => (text = ago(started, now)));
    expect(text).toBe("0 s ago");
    c.tick(started + 5000);
    expect(text).toBe("5 s ago");
    c.tick(started + 125_000);
    expect(text).toBe("2 min ago");
    off();
    expect(c.running).toBe(false);
  });
});

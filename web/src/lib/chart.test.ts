import { describe, expect, it } from "vitest";
import { hoverTime, labelWidth, niceStep, timeLabel, timeLabelSpace, timeTicks, valueAxis } from "./chart";
import { bytes, figure, rate, unitFor } from "./format";

describe("units", () => {
  it("scales byte rates in decimal units", () => {
    expect(rate(820)).toBe("820 B/s");
    expect(rate(1500)).toBe("1.5 kB/s");
    expect(rate(12_340_000)).toBe("12.3 MB/s");
    expect(rate(2_000_000_000)).toBe("2 GB/s");
    expect(rate(null)).toBe("–");
  });
  it("scales bytes in binary units", () => {
    expect(figure("bytes", 512)).toBe("512 B");
    expect(figure("bytes", 1536)).toBe("1.5 KiB");
    expect(figure("bytes", 3 * 1024 ** 3)).toBe("3 GiB");
    expect(bytes(1024 ** 2 * 200)).toBe("200 MiB");
    expect(bytes(0)).toBe("0 B");
  });
  it("writes percentages, counts and durations compactly", () => {
    expect(figure("percent", 45.23)).toBe("45.2%");
    expect(figure("percent", 100)).toBe("100%");
    expect(figure("count", 10_000)).toBe("10k");
    expect(figure("count", 7)).toBe("7");
    expect(figure("perSecond", 1250)).toBe("1.25k/s");
    expect(figure("ms", 1500)).toBe("1.5 s");
    expect(figure("ms", 42)).toBe("42 ms");
  });
  it("picks the unit from the value", () => {
    expect(unitFor("rate", 999).name).toBe("B/s");
    expect(unitFor("rate", 1000).name).toBe("kB/s");
    expect(unitFor("bytes", 1023).name).toBe("B");
    expect(unitFor("bytes", 1024).name).toBe("KiB");
  });
});

describe("value axis", () => {
  it("chooses nice steps", () => {
    expect(niceStep(100, 4)).toBe(25);
    expect(niceStep(7, 4)).toBe(2);
    expect(niceStep(0.9, 4)).toBe(0.25);
    expect(niceStep(0, 4)).toBe(1);
  });
  it("spans percentages 0–100 %", () => {
    const a = valueAxis("percent", 37);
    expect(a.ticks).toEqual([0, 25, 50, 75, 100]);
    expect(a.labels).toEqual(["0%", "25%", "50%", "75%", "100%"]);
  });
  it("labels a byte rate axis in one unit, without thousands separators", () => {
    const a = valueAxis("rate", 12_345);
    expect(a.unit.name).toBe("kB/s");
    expect(a.labels).toEqual(["0", "5 kB/s", "10 kB/s", "15 kB/s"]);
    expect(a.max).toBe(15_000);
    for (const l of a.labels) expect(l).not.toMatch(/,/);
  });
  it("moves to the next unit when the top tick reaches it", () => {
    const a = valueAxis("rate", 950_000);
    expect(a.unit.name).toBe("MB/s");
    expect(a.labels.at(-1)).toBe("1 MB/s");
  });
  it("labels bytes in binary units", () => {
    const a = valueAxis("bytes", 3.4 * 1024 ** 3);
    expect(a.unit.name).toBe("GiB");
    expect(a.labels).toEqual(["0", "1 GiB", "2 GiB", "3 GiB", "4 GiB"]);
    expect(a.ticks[1]).toBe(1024 ** 3);
  });
  it("keeps counts whole and compact", () => {
    expect(valueAxis("count", 3).labels).toEqual(["0", "1", "2", "3"]);
    expect(valueAxis("count", 18_000).labels).toEqual(["0", "5k", "10k", "15k", "20k"]);
    expect(valueAxis("count", 0).labels).toEqual(["0", "1"]);
  });
  it("makes room for the longest label", () => {
    const a = valueAxis("rate", 12_345);
    expect(a.width).toBe(labelWidth(a.labels));
    expect(a.width).toBeGreaterThanOrEqual("15 kB/s".length * 7);
    expect(labelWidth(["0"])).toBeLessThan(labelWidth(["100 MB/s"]));
  });
  it("puts fewer ticks on a shorter chart", () => {
    expect(valueAxis("count", 100, 90).ticks.length).toBeLessThan(valueAxis("count", 100, 240).ticks.length);
  });
});

describe("time axis", () => {
  const t0 = Date.UTC(2026, 11, 2, 9, 7) / 1000;
  it("takes as many ticks as the width has room for", () => {
    for (const width of [280, 400, 640, 1200]) {
      for (const span of [3600, 86400, 7 * 86400, 90 * 86400]) {
        const { ticks } = timeTicks(t0, t0 + span, width);
        expect(ticks.length).toBeGreaterThan(0);
        expect(ticks.length).toBeLessThanOrEqual(Math.floor(width / timeLabelSpace));
        // Ticks at least a label's room apart.
        const px = ((ticks[1] ?? ticks[0] + span) - ticks[0]) * (width / span);
        expect(px).toBeGreaterThanOrEqual(timeLabelSpace - 1);
      }
    }
  });
  it("aligns ticks to the clock and labels them briefly", () => {
    const { ticks, step } = timeTicks(t0, t0 + 3600, 640);
    expect(step).toBe(600);
    expect(ticks.map((t) => timeLabel(t, step))).toEqual(["09:10", "09:20", "09:30", "09:40", "09:50", "10:00"]);
  });
  it("labels days by date and midnight with the day", () => {
    const { ticks, step } = timeTicks(t0, t0 + 30 * 86400, 640);
    expect(step).toBeGreaterThanOrEqual(86400);
    expect(timeLabel(ticks[0], step)).toBe("Dec 3");
    expect(timeLabel(Date.UTC(2026, 11, 3) / 1000, 6 * 3600)).toBe("Dec 3");
  });
  it("follows the local clock", () => {
    // Two hours east of UTC: 09:07 UTC is 11:07 there.
    const { ticks, step } = timeTicks(t0, t0 + 3600, 640, 7200);
    expect(timeLabel(ticks[0], step, 7200)).toBe("11:10");
    expect(hoverTime(t0, 7200)).toBe("Dec 2 11:07");
  });
});

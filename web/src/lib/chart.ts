// The pure part of the console's charts: the value axis (ticks in one
// unit, labels that fit) and the time axis (as many ticks as the width
// takes, labels that never overlap).
import { inUnit, nextUnit, unitFor, type Kind, type Unit } from "./format";

// niceStep is the smallest step of 1, 2, 2.5 or 5 times a power of ten
// that covers span in at most count steps.
export function niceStep(span: number, count: number): number {
  if (!(span > 0) || count < 1) return 1;
  const raw = span / count;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw * (1 - 1e-9)) return m * p;
  return 10 * p;
}

export interface ValueAxis {
  // ticks are in base units (bytes, bytes per second…), from 0 up.
  ticks: number[];
  labels: string[];
  max: number;
  unit: Unit;
  // width is the room, in CSS pixels, the longest label takes.
  width: number;
}

// decimalsOf is how many decimals a step needs: 0.25 needs 2.
function decimalsOf(step: number): number {
  for (let d = 0; d < 4; d++) if (Math.abs(Math.round(step * 10 ** d) - step * 10 ** d) < 1e-9) return d;
  return 4;
}

// labelWidth estimates the pixels a label takes in the axis font (12 px):
// digits are about 7 px wide, with room for the tick.
export function labelWidth(labels: string[]): number {
  const longest = Math.max(1, ...labels.map((l) => l.length));
  return Math.ceil(longest * 7 + 14);
}

// valueAxis chooses the value axis of a chart of the given height whose
// values reach max: ticks from 0 in one unit of the kind, about one per
// 40 px; percentages always span 0–100 %.
export function valueAxis(kind: Kind, max: number, height = 180, fixedMax?: number): ValueAxis {
  const count = Math.max(2, Math.min(6, Math.floor(height / 40)));
  const top = fixedMax ?? (kind === "percent" ? 100 : Math.max(0, max));
  let unit = unitFor(kind, top);
  let step = 0;
  let end = 0;
  for (;;) {
    const scaled = top / unit.factor;
    step = scaled > 0 ? niceStep(scaled, count) : 1;
    // Counts and bytes in their base unit have whole steps.
    if (unit.factor === 1 && kind !== "percent" && kind !== "ms" && step < 1) step = 1;
    end = scaled > 0 ? Math.ceil(scaled / step - 1e-9) * step : step;
    const up = nextUnit(kind, unit);
    // 1000 kB/s is better read as 1 MB/s.
    if (up && end * unit.factor >= up.factor) unit = up;
    else break;
  }
  if (fixedMax != null) end = fixedMax / unit.factor;
  const d = decimalsOf(step);
  const ticks: number[] = [];
  for (let v = 0; v <= end + step * 1e-9; v += step) ticks.push(+(v * unit.factor).toFixed(6));
  // Zero needs no unit, but for percentages.
  const labels = ticks.map((t) => (t === 0 && kind !== "percent" ? "0" : inUnit(t, unit, d)));
  return { ticks, labels, max: end * unit.factor, unit, width: labelWidth(labels) };
}

const minute = 60;
const hour = 3600;
const day = 86400;
const timeSteps = [
  10, 30, minute, 2 * minute, 5 * minute, 10 * minute, 15 * minute, 30 * minute,
  hour, 2 * hour, 3 * hour, 6 * hour, 12 * hour, day, 2 * day, 7 * day, 14 * day, 30 * day,
];

// The room a time label needs, with a gap to the next: "12:30", "Dec 12".
export const timeLabelSpace = 64;

// timeTicks chooses ticks for a time axis from min to max (seconds) that
// is width pixels wide: the smallest step in timeSteps that leaves
// timeLabelSpace between labels, aligned to the local clock (offset is
// the local time's offset from UTC, in seconds, east positive).
export function timeTicks(min: number, max: number, width: number, offset = 0): { ticks: number[]; step: number } {
  const fit = Math.max(1, Math.floor(width / timeLabelSpace));
  const span = Math.max(1, max - min);
  const step = timeSteps.find((s) => span / s <= fit) ?? Math.ceil(span / fit / day) * day;
  const ticks: number[] = [];
  for (let t = Math.ceil((min + offset) / step) * step - offset; t <= max; t += step) ticks.push(t);
  return { ticks, step };
}

const months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

// timeLabel writes a tick of a time axis whose step is step: the time of
// day ("09:30"), or the day ("Dec 2") for day steps and at midnight.
// offset is as timeTicks takes it.
export function timeLabel(t: number, step: number, offset = 0): string {
  const d = new Date((t + offset) * 1000);
  const hh = String(d.getUTCHours()).padStart(2, "0");
  const mm = String(d.getUTCMinutes()).padStart(2, "0");
  if (step >= day || (hh === "00" && mm === "00")) return `${months[d.getUTCMonth()]} ${d.getUTCDate()}`;
  if (step < minute) return `${hh}:${mm}:${String(d.getUTCSeconds()).padStart(2, "0")}`;
  return `${hh}:${mm}`;
}

// hoverTime writes the time a pointer is on, to the minute, with the day.
export function hoverTime(t: number, offset = 0): string {
  const d = new Date((t + offset) * 1000);
  const hh = String(d.getUTCHours()).padStart(2, "0");
  const mm = String(d.getUTCMinutes()).padStart(2, "0");
  return `${months[d.getUTCMonth()]} ${d.getUTCDate()} ${hh}:${mm}`;
}

// localOffset is the browser's offset from UTC at time t (seconds).
export function localOffset(t: number): number {
  return -new Date(t * 1000).getTimezoneOffset() * 60;
}

// ago says how long before now a time was, briefly: "12 s ago", "3 min
// ago", "5 h ago", "2 d ago"; "never" for none. Components show it with
// <Ago>, which the shared clock (lib/clock.ts) keeps fresh.
export function ago(at: string | number | null | undefined, now = Date.now()): string {
  if (at == null || at === "") return "never";
  const s = Math.max(0, Math.round((now - (typeof at === "number" ? at : Date.parse(at))) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function percent(v: number | null | undefined): string {
  return v == null ? "–" : `${Math.round(v)}%`;
}

// A kind of figure, which says how its values are scaled and written:
// percentages; bytes in binary units (KiB, MiB, GiB); byte rates in
// decimal units (kB/s, MB/s), as network figures are; plain counts
// (1.2k, 3M); counts per second; milliseconds (then seconds).
export type Kind = "percent" | "bytes" | "rate" | "count" | "perSecond" | "ms";

interface Ladder {
  base: number;
  units: string[];
  space: boolean;
}

const ladders: Record<Kind, Ladder> = {
  percent: { base: 0, units: ["%"], space: false },
  bytes: { base: 1024, units: ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], space: true },
  rate: { base: 1000, units: ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"], space: true },
  count: { base: 1000, units: ["", "k", "M", "G", "T"], space: false },
  perSecond: { base: 1000, units: ["/s", "k/s", "M/s", "G/s"], space: false },
  ms: { base: 1000, units: ["ms", "s"], space: true },
};

// A unit of a kind: its name and how many base units it holds.
export interface Unit {
  name: string;
  factor: number;
  space: boolean;
}

// unitFor picks the largest unit of the kind in which v is at least 1
// (the smallest for 0 or less), so that a figure has at most three
// digits before the point.
export function unitFor(kind: Kind, v: number): Unit {
  const l = ladders[kind];
  let i = 0;
  let factor = 1;
  const a = Math.abs(v);
  while (l.base && i < l.units.length - 1 && a >= factor * l.base) {
    factor *= l.base;
    i++;
  }
  return { name: l.units[i], factor, space: l.space };
}

// nextUnit is the unit above u, or null at the top of the ladder.
export function nextUnit(kind: Kind, u: Unit): Unit | null {
  const l = ladders[kind];
  const i = l.units.indexOf(u.name);
  if (!l.base || i < 0 || i >= l.units.length - 1) return null;
  return { name: l.units[i + 1], factor: u.factor * l.base, space: l.space };
}

// trim writes n with at most the given decimals, without trailing zeros.
export function trim(n: number, decimals: number): string {
  const s = n.toFixed(decimals);
  return s.includes(".") ? s.replace(/\.?0+$/, "") : s;
}

// inUnit writes v in the unit u with the given decimals: "1.5 MB/s".
export function inUnit(v: number, u: Unit, decimals: number): string {
  const n = trim(v / u.factor, decimals);
  return u.name === "" ? n : n + (u.space ? " " : "") + u.name;
}

// figure writes one value of a kind in its own unit, with three
// significant digits at most: "512 KiB", "1.23 MB/s", "45.2%", "1.5k".
export function figure(kind: Kind, v: number | null | undefined): string {
  if (v == null || !Number.isFinite(v)) return "–";
  const u = unitFor(kind, v);
  const n = Math.abs(v / u.factor);
  // Whole bytes and counts have no decimals.
  const whole = u.factor === 1 && (kind === "bytes" || kind === "rate" || kind === "count");
  const decimals = whole ? 0 : n >= 100 ? 0 : n >= 10 ? 1 : 2;
  return inUnit(v, u, decimals);
}

export function bytes(n: number | null | undefined): string {
  if (n == null) return "–";
  const u = unitFor("bytes", n);
  const v = n / u.factor;
  return `${v < 10 && u.factor > 1 ? v.toFixed(1) : Math.round(v)} ${u.name}`;
}

// rate writes a byte rate in decimal units: "820 B/s", "1.2 MB/s".
export function rate(n: number | null | undefined): string {
  return figure("rate", n);
}

export function duration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

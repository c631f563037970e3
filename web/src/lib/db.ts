// Logic of the databases screens that does not depend on Preact: how a
// query result's values read, where an engine's error points in the
// statement, how long a key lives, and how a database job is awaited.

import { finished } from "./jobs";

export { finished };

// errorAt splits a statement at the 1-based character position an engine's
// error points at: the text before it, the word (or single character) it
// points at, and the rest. Positions count characters, not UTF-16 units.
// null when there is no position or it lies outside the statement.
export function errorAt(sql: string, position: number | null | undefined): { before: string; at: string; after: string } | null {
  if (!position || position < 1) return null;
  const chars = Array.from(sql);
  const i = position - 1;
  if (i >= chars.length) return null;
  let j = i + 1;
  if (/[\p{L}\p{N}_$]/u.test(chars[i])) while (j < chars.length && /[\p{L}\p{N}_$]/u.test(chars[j])) j++;
  return { before: chars.slice(0, i).join(""), at: chars.slice(i, j).join(""), after: chars.slice(j).join("") };
}

// offsetOf turns a 1-based character position into the UTF-16 offset a
// textarea's selection uses.
export function offsetOf(sql: string, position: number): number {
  return Array.from(sql).slice(0, Math.max(0, position - 1)).join("").length;
}

// cellText is how a result value reads in the grid: NULL for null,
// binary as its size, objects and arrays as JSON.
export function cellText(v: unknown): string {
  if (v === null || v === undefined) return "NULL";
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean" || typeof v === "bigint") return String(v);
  if (typeof v === "object" && "$base64" in (v as object)) {
    const b = String((v as { $base64: unknown }).$base64 ?? "");
    const n = Math.floor((b.replace(/=+$/, "").length * 3) / 4);
    return `(binary, ${n} bytes)`;
  }
  return JSON.stringify(v);
}

// numericType says whether an engine's column type holds numbers, whose
// cells are aligned to the right.
export function numericType(type: string): boolean {
  return /^(int\d*|integer|bigint|smallint|tinyint|mediumint|float\d*|double|real|numeric|decimal|number|serial\d*|bigserial|smallserial|money|oid|year)\b/i.test(type.trim());
}

// ttlText says how long a key lives: Redis answers -1 for a key without
// an expiry and -2 for one that is gone.
export function ttlText(seconds: number): string {
  if (seconds === -1) return "no expiry";
  if (seconds === -2 || seconds < 0) return "gone";
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
  return `${Math.floor(seconds / 86400)} d ${Math.floor((seconds % 86400) / 3600)} h`;
}

export interface KVValue {
  key: string;
  type: string;
  ttl_seconds: number;
  size: number;
  truncated: boolean;
  string?: string;
  hash?: Record<string, string>;
  list?: string[];
  set?: string[];
  zset?: { member: string; score: number }[];
  stream?: { id: string; fields: Record<string, string> }[];
}

// kvRows turns a key's value into a table: its column names and rows,
// whatever its type.
export function kvRows(v: KVValue): { columns: string[]; rows: string[][] } {
  switch (v.type) {
    case "string":
      return { columns: ["Value"], rows: [[v.string ?? ""]] };
    case "hash":
      return { columns: ["Field", "Value"], rows: Object.entries(v.hash ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)) };
    case "list":
      return { columns: ["Index", "Value"], rows: (v.list ?? []).map((x, i) => [String(i), x]) };
    case "set":
      return { columns: ["Member"], rows: (v.set ?? []).slice().sort().map((x) => [x]) };
    case "zset":
      return { columns: ["Member", "Score"], rows: (v.zset ?? []).map((x) => [x.member, String(x.score)]) };
    case "stream":
      return {
        columns: ["Id", "Fields"],
        rows: (v.stream ?? []).map((e) => [e.id, Object.entries(e.fields).map(([k, x]) => `${k}=${x}`).join(" ")]),
      };
    default:
      return { columns: ["Value"], rows: [] };
  }
}

// memoryLimit reads the memory field of a managed instance, in MiB, as
// bytes; undefined when empty, NaN when it is not a number.
export function memoryLimit(mib: string): number | undefined {
  const s = mib.trim();
  if (!s) return undefined;
  if (!/^\d+(\.\d+)?$/.test(s)) return NaN;
  return Math.round(Number(s) * 1024 * 1024);
}

export interface JobResult {
  job_id: string;
  status: "queued" | "running" | "succeeded" | "failed" | "cancelled";
  error: string | null;
  data: unknown;
  redacted?: boolean;
}

// awaitJob reads a database job until it is finished: get(wait) reads it,
// answering early when it finishes; after a read that found it still
// running, it waits for done() (the stream saying the job changed) before
// reading again, so a long query costs no request a second. stopped()
// ends the wait (the user stopped waiting).
export async function awaitJob(
  get: (waitSeconds: number) => Promise<JobResult>,
  done: () => Promise<void>,
  stopped: () => boolean = () => false,
): Promise<JobResult | null> {
  let r = await get(30);
  while (!finished(r.status)) {
    if (stopped()) return null;
    await done();
    if (stopped()) return null;
    r = await get(30);
  }
  return r;
}

// Changes remembers that something changed since the last next(): a
// waiter that subscribes before it reads never misses a change that came
// between its read and its wait.
export class Changes {
  private changed = false;
  private wake: (() => void) | null = null;

  notify() {
    this.changed = true;
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  next(): Promise<void> {
    if (this.changed) {
      this.changed = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.wake = () => {
        this.changed = false;
        resolve();
      };
    });
  }
}

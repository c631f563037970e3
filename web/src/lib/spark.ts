// sparkPoints turns a series into the points of an SVG polyline of the
// given size: at most max points (bucket averages), nulls skipped, values
// on a 0–100 scale (percentages).
export function sparkPoints(values: (number | null)[], width: number, height: number, max = 40): string {
  const vals = values.filter((v): v is number => v != null && Number.isFinite(v));
  if (vals.length < 2) return "";
  const n = Math.min(max, vals.length);
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const from = Math.floor((i * vals.length) / n);
    const to = Math.max(from + 1, Math.floor(((i + 1) * vals.length) / n));
    let sum = 0;
    for (let j = from; j < to; j++) sum += vals[j];
    const v = Math.min(100, Math.max(0, sum / (to - from)));
    const x = (i / (n - 1)) * width;
    const y = height - (v / 100) * height;
    out.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  }
  return out.join(" ");
}

// Batches loads keys in batches of at most size keys, one batch at a
// time, each key once: the rows a list shows ask in one request. A key the
// answer leaves out (or whose batch failed) is done with null.
export class Batches<T> {
  private queue: string[] = [];
  private running = false;
  readonly done = new Map<string, T | null>();
  private started = new Set<string>();
  constructor(
    private readonly size: number,
    private readonly load: (keys: string[]) => Promise<Map<string, T>>,
    private readonly onDone: () => void,
  ) {}

  want(keys: string[]) {
    for (const k of keys) {
      if (this.started.has(k)) continue;
      this.started.add(k);
      this.queue.push(k);
    }
    void this.next();
  }

  private async next() {
    if (this.running || this.queue.length === 0) return;
    this.running = true;
    const batch = this.queue.splice(0, this.size);
    try {
      const got = await this.load(batch);
      for (const k of batch) this.done.set(k, got.get(k) ?? null);
    } catch {
      for (const k of batch) this.done.set(k, null);
    } finally {
      this.running = false;
      this.onDone();
      void this.next();
    }
  }
}

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

// A Pool runs at most limit loads at once, each key once.
export class Pool<T> {
  private running = 0;
  private queue: (() => void)[] = [];
  readonly done = new Map<string, T | null>();
  private started = new Set<string>();
  constructor(private readonly limit: number, private readonly load: (key: string) => Promise<T>, private readonly onDone: () => void) {}

  want(keys: string[]) {
    for (const k of keys) {
      if (this.started.has(k)) continue;
      this.started.add(k);
      this.queue.push(() => {
        this.running++;
        this.load(k)
          .then((v) => this.done.set(k, v), () => this.done.set(k, null))
          .finally(() => {
            this.running--;
            this.onDone();
            this.next();
          });
      });
    }
    this.next();
  }

  private next() {
    while (this.running < this.limit && this.queue.length) this.queue.shift()!();
  }
}

// ago says how long before now a time was, briefly: "12 s ago", "3 min
// ago", "5 h ago", "2 d ago"; "never" for none.
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

export function bytes(n: number | null | undefined): string {
  if (n == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v < 10 && i > 0 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

export function duration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

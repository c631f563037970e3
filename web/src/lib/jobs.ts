// upsertJob puts a job into a newest-first list: replaced where it is, or
// added at the top; the list keeps at most limit jobs.
export function upsertJob<T extends { id: string }>(list: T[], job: T, limit = 100): T[] {
  const i = list.findIndex((j) => j.id === job.id);
  if (i >= 0) {
    const next = list.slice();
    next[i] = job;
    return next;
  }
  return [job, ...list].slice(0, limit);
}

export const finishedStates = ["succeeded", "failed", "cancelled"];

// mergeEvents adds events that arrived live to those loaded, by time and
// without repeating one already there: the same sequence number, or
// without one the same time, level and message. (A time read back from
// the store can be less precise than the same time sent live.)
export function mergeEvents<T extends { at: string; level: string; message: string; seq?: number }>(have: T[], more: T[]): T[] {
  const key = (e: T) => (e.seq != null ? `#${e.seq}` : `${Date.parse(e.at)}\u0000${e.level}\u0000${e.message}`);
  const seen = new Set(have.map(key));
  const out = have.slice();
  for (const e of more) if (!seen.has(key(e))) (seen.add(key(e)), out.push(e));
  return out.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
}

import { useEffect, useState } from "preact/hooks";
import { stream, type StreamState } from "./stream";

// useLive calls fn for each stream message of the given types while the
// component is shown. "reset" is always included: messages were missed,
// so whatever the component shows must be reloaded.
export function useLive(types: string[], fn: (data: any, type: string) => void, deps: unknown[] = []) {
  useEffect(() => {
    const offs = [...new Set([...types, "reset"])].map((t) => stream.on(t, fn));
    return () => offs.forEach((off) => off());
  }, deps);
}

export function useStreamState(): StreamState {
  const [s, set] = useState<StreamState>(stream.state);
  useEffect(() => stream.onState(set), []);
  return s;
}

// serverStatusAfter is a server's status after an event of the bus, or
// null when the event does not change it.
export function serverStatusAfter(eventType: string): string | null {
  switch (eventType) {
    case "server.enrolled":
    case "server.online":
      return "online";
    case "server.offline":
      return "offline";
    case "server.revoked":
      return "revoked";
    default:
      return null;
  }
}

// The newest state of each job the stream reported, so that a screen that
// learns of a job from an API answer (the action it queued) does not miss
// a change the stream brought before that answer: a fast job can finish
// before the request that queued it returns.
const seenJobs = new Map<string, { id: string; status: string }>();
stream.on("job", (j) => {
  if (!j?.id) return;
  seenJobs.delete(j.id);
  seenJobs.set(j.id, j);
  if (seenJobs.size > 1000) seenJobs.delete(seenJobs.keys().next().value!);
});

const jobRank: Record<string, number> = { queued: 0, running: 1, succeeded: 2, failed: 2, cancelled: 2 };

// newestJob returns the later of a job as an API answer gave it and as
// the stream last reported it.
export function newestJob<T extends { id: string; status: string }>(j: T): T {
  return pickNewer(j, seenJobs.get(j.id) as Partial<T> | undefined);
}

export function pickNewer<T extends { id: string; status: string }>(j: T, seen: Partial<T> | undefined): T {
  if (!seen?.status) return j;
  return (jobRank[seen.status] ?? 0) > (jobRank[j.status] ?? 0) ? { ...j, ...seen } : j;
}

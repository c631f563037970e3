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

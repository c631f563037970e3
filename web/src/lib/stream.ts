import { api } from "../api/client";

// The live stream: one EventSource per tab on /api/v1/stream. EventSource
// sends no headers, so each connection is opened with a single-use ticket
// from an authenticated POST; a reconnect takes a new ticket and resumes
// after the last message seen (last_event_id). When the control plane
// cannot resume (it restarted, or the gap is too old), it sends "reset"
// and every screen reloads what it shows.

export type StreamState = "connecting" | "live" | "offline";

type Handler = (data: any, type: string) => void;

export const messageTypes = ["job", "job.events", "event", "inbox", "reset"] as const;

export class Stream {
  private es: EventSource | null = null;
  private lastId = "";
  private handlers = new Map<string, Set<Handler>>();
  private stateHandlers = new Set<(s: StreamState) => void>();
  private retry = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private stopped = true;
  state: StreamState = "offline";

  constructor(private readonly ticket: () => Promise<string>) {}

  on(type: string, fn: Handler): () => void {
    let set = this.handlers.get(type);
    if (!set) this.handlers.set(type, (set = new Set()));
    set.add(fn);
    return () => set!.delete(fn);
  }

  onState(fn: (s: StreamState) => void): () => void {
    this.stateHandlers.add(fn);
    return () => this.stateHandlers.delete(fn);
  }

  private setState(s: StreamState) {
    this.state = s;
    for (const fn of this.stateHandlers) fn(s);
  }

  // dispatch hands a message to the handlers of its type and of "*".
  dispatch(type: string, id: string, raw: string) {
    if (id) this.lastId = id;
    let data: unknown = null;
    try {
      data = raw ? JSON.parse(raw) : null;
    } catch {
      return;
    }
    for (const key of [type, "*"]) for (const fn of this.handlers.get(key) ?? []) fn(data, type);
  }

  start() {
    if (!this.stopped) return;
    this.stopped = false;
    void this.connect();
  }

  stop() {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.es?.close();
    this.es = null;
    this.setState("offline");
  }

  private async connect() {
    if (this.stopped) return;
    this.setState("connecting");
    let ticket: string;
    try {
      ticket = await this.ticket();
    } catch {
      this.again();
      return;
    }
    if (this.stopped) return;
    const q = new URLSearchParams({ ticket });
    if (this.lastId) q.set("last_event_id", this.lastId);
    const es = new EventSource("/api/v1/stream?" + q.toString());
    this.es = es;
    es.onopen = () => {
      this.retry = 0;
      this.setState("live");
    };
    for (const t of messageTypes) {
      es.addEventListener(t, (e) => this.dispatch(t, (e as MessageEvent).lastEventId, (e as MessageEvent).data));
    }
    es.onerror = () => {
      // The browser would reconnect with the spent ticket: close and take
      // a new one instead.
      es.close();
      if (this.es === es) this.es = null;
      this.again();
    };
  }

  private again() {
    if (this.stopped) return;
    this.setState("offline");
    const wait = backoff(this.retry++);
    this.timer = setTimeout(() => void this.connect(), wait);
  }
}

// backoff is the wait before reconnect attempt n: 0.5 s doubling to 15 s.
export function backoff(n: number): number {
  return Math.min(500 * 2 ** n, 15_000);
}

export const stream = new Stream(async () => {
  const { data, error } = await api.POST("/api/v1/stream/tickets");
  if (error || !data) throw new Error("no stream ticket");
  return (data as { ticket: string }).ticket;
});

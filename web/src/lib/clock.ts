import { useEffect, useState } from "preact/hooks";
import { ago } from "./format";

// Clock is one timer for every relative time the console shows: it
// ticks once a second while anything listens, and not at all otherwise,
// so that a list of a thousand "5 s ago" has one timer, not a thousand.
export class Clock {
  private readonly listeners = new Set<(now: number) => void>();
  private timer: unknown = null;
  constructor(
    private readonly period = 1000,
    // Called as functions, never as methods of this object (the
    // browser's timers refuse any other this).
    private readonly timers: { set: (fn: () => void, ms: number) => unknown; clear: (t: unknown) => void } = {
      set: (fn, ms) => setInterval(fn, ms),
      clear: (t) => clearInterval(t as ReturnType<typeof setInterval>),
    },
  ) {}

  get listening(): number {
    return this.listeners.size;
  }

  get running(): boolean {
    return this.timer != null;
  }

  // subscribe calls fn with the time at each tick until the returned
  // function is called.
  subscribe(fn: (now: number) => void): () => void {
    this.listeners.add(fn);
    if (!this.timer) this.timer = this.timers.set(() => this.tick(), this.period);
    return () => {
      this.listeners.delete(fn);
      if (this.listeners.size === 0 && this.timer) {
        this.timers.clear(this.timer);
        this.timer = null;
      }
    };
  }

  tick(now = Date.now()) {
    for (const fn of [...this.listeners]) fn(now);
  }
}

export const clock = new Clock();

// useNow is the current time, renewed at each tick of the shared clock.
export function useNow(): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => clock.subscribe(setNow), []);
  return now;
}

// useAgo is ago(at), kept fresh by the shared clock: the component
// renders again only when the words change ("5 s ago" → "6 s ago", but a
// "3 d ago" stays put for a day).
export function useAgo(at: string | number | null | undefined): string {
  const [text, setText] = useState(() => ago(at));
  useEffect(() => {
    setText(ago(at));
    return clock.subscribe((now) => setText(ago(at, now)));
  }, [at]);
  return text;
}

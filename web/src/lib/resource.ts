import { useEffect, useRef, useState } from "preact/hooks";
import { asProblem, type Problem } from "./problem";

export interface Resource<T> {
  // data is the last answer, kept while a reload runs and after a reload
  // failed, so a screen never blanks; problem says why the last load failed.
  data: T | null;
  problem: Problem | null;
  loading: boolean;
  reload: () => Promise<void>;
  // set changes the data in place, as a stream message does.
  set: (fn: (cur: T | null) => T | null) => void;
}

// Loads is the part of useResource that does not depend on Preact: it
// runs loads and keeps only the answer of the newest one, so a slow,
// older answer never replaces a newer one.
export class Loads<T> {
  private seq = 0;
  constructor(private readonly apply: (r: { data?: T; problem: Problem | null; loading: boolean }) => void) {}

  async run(load: () => Promise<T>): Promise<void> {
    const n = ++this.seq;
    this.apply({ problem: null, loading: true });
    try {
      const data = await load();
      if (n === this.seq) this.apply({ data, problem: null, loading: false });
    } catch (err) {
      if (n === this.seq) this.apply({ problem: asProblem(err), loading: false });
    }
  }

  // stop makes every load under way answer into nothing.
  stop() {
    this.seq++;
  }
}

// useResource loads what a screen shows when deps change, and again on
// reload() (after an action, or when the stream says something changed).
export function useResource<T>(load: () => Promise<T>, deps: unknown[] = []): Resource<T> {
  const [state, setState] = useState<{ data: T | null; problem: Problem | null; loading: boolean }>({
    data: null,
    problem: null,
    loading: true,
  });
  const loads = useRef<Loads<T> | null>(null);
  const current = useRef(load);
  current.current = load;
  if (!loads.current) {
    loads.current = new Loads<T>((r) =>
      setState((s) => ({ data: r.data !== undefined ? r.data : s.data, problem: r.problem, loading: r.loading })),
    );
  }
  const reload = () => loads.current!.run(() => current.current());
  useEffect(() => {
    void reload();
    return () => loads.current!.stop();
  }, deps);
  return {
    ...state,
    reload,
    set: (fn) => setState((s) => ({ ...s, data: fn(s.data) })),
  };
}

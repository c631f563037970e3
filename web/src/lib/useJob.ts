import { useEffect, useRef, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { finished, mergeEvents } from "./jobs";
import { newestJob, useLive } from "./live";

type Job = Schemas["Job"];
type JobEvent = Schemas["Event"];

// JobHandlers are what a screen does with the stream's messages about one
// job: a change of its state, progress events (administrators only), and
// a reset (messages were missed, so the job must be read again).
export interface JobHandlers {
  job?: (data: any) => void;
  events?: (events: JobEvent[]) => void;
  reset?: () => void;
}

// routeJobMessage hands one stream message to the handler it concerns, if
// it is about the job id (a reset concerns every job).
export function routeJobMessage(id: string | null | undefined, type: string, data: any, on: JobHandlers) {
  if (!id) return;
  if (type === "reset") on.reset?.();
  else if (type === "job" && data?.id === id) on.job?.(data);
  else if (type === "job.events" && data?.job_id === id) on.events?.(data.events as JobEvent[]);
}

// useJobLive calls the handlers for the stream's messages about the job
// id while the component is shown; the handlers are those of the render
// in which id (or deps) last changed.
export function useJobLive(id: string | null | undefined, on: JobHandlers, deps: unknown[] = []) {
  useLive(["job", "job.events"], (data, type) => routeJobMessage(id, type, data, on), [id, ...deps]);
}

export interface Followed<D> {
  job: Job | null;
  events: JobEvent[];
  // detail is the job as read once it finished (or after a reset).
  detail: D | null;
}

// JobFollow is the part of useJob that does not depend on Preact: it
// keeps one job current from the stream (its state and events) and, once
// the job finished or messages were missed, reads it for its outcome.
export class JobFollow<D extends Job & { events?: JobEvent[] | null }> {
  state: Followed<D> = { job: null, events: [], detail: null };

  constructor(
    private readonly read: (id: string) => Promise<D>,
    private readonly apply: (s: Followed<D>) => void,
    public onFinished?: (d: D) => void,
  ) {}

  private set(s: Partial<Followed<D>>) {
    this.state = { ...this.state, ...s };
    this.apply(this.state);
  }

  // start follows j, in its newest known state.
  start(j: Job) {
    const now = newestJob(j);
    this.set({ job: now, events: [], detail: null });
    if (finished(now.status)) void this.finish(now.id);
  }

  clear() {
    this.set({ job: null, events: [], detail: null });
  }

  // message takes one stream message.
  message(type: string, data: any) {
    const id = this.state.job?.id;
    routeJobMessage(id, type, data, {
      reset: () => void this.finish(id!),
      job: (j) => {
        const cur = this.state.job;
        if (cur) this.set({ job: { ...cur, ...j } });
        if (finished(j.status)) void this.finish(id!);
      },
      events: (evs) => this.set({ events: mergeEvents(this.state.events, evs) }),
    });
  }

  private async finish(id: string) {
    try {
      const full = await this.read(id);
      // The finished job's own events are all of them.
      this.set({ detail: full, job: full, ...(full.events?.length ? { events: full.events } : {}) });
      this.onFinished?.(full);
    } catch {
      // The job is shown as the stream reported it.
    }
  }
}

// readJob reads a job as the jobs API gives it.
export const readJob = (id: string) => ok(api.GET("/api/v1/jobs/{id}", { params: { path: { id } } }));

// useJob follows one job a screen started, live: its state from the
// stream's job messages, its events from job.events, and once it
// finished, the job as read(id) gives it (its data and events), which
// onFinished also gets.
export function useJob<D extends Job & { events?: JobEvent[] | null }>(read: (id: string) => Promise<D>, onFinished?: (d: D) => void) {
  const [state, setState] = useState<Followed<D>>({ job: null, events: [], detail: null });
  const follow = useRef<JobFollow<D> | null>(null);
  if (!follow.current) follow.current = new JobFollow<D>(read, setState);
  follow.current.onFinished = onFinished;
  const f = follow.current;
  useLive(["job", "job.events"], (data, type) => f.message(type, data));
  return { ...state, start: (j: Job) => f.start(j), clear: () => f.clear() };
}

// useJobEnd calls fn once a job has ended: at once when the API answer or
// the stream already says so, else when the stream reports it (after a
// reset, when a read of the job says so).
export function useJobEnd(job: { id: string; status: string } | null | undefined, fn: (status: string) => void) {
  const id = job?.id;
  useEffect(() => {
    if (!job) return;
    const j = newestJob(job);
    if (finished(j.status)) fn(j.status);
  }, [id]);
  useJobLive(id, {
    reset: () =>
      void readJob(id!)
        .then((j) => finished(j.status) && fn(j.status))
        .catch(() => {}),
    job: (data) => finished(data.status) && fn(data.status),
  });
}

import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../../api/client";
import { awaitJob, Changes, finished, type JobResult } from "../../lib/db";
import { mergeEvents } from "../../lib/jobs";
import { newestJob, useLive } from "../../lib/live";
import { stream } from "../../lib/stream";
import { readJob } from "../../lib/useJob";

export type Instance = Schemas["Detail"];
export type Job = Schemas["Job"];

// Waiting is a database job the screen waits for; stop() ends the wait.
export class Waiting {
  private stopped = false;
  private changes = new Changes();
  private offs: (() => void)[];

  constructor(readonly jobId: string) {
    // Subscribed before the first read, so no change is missed.
    this.offs = [
      stream.on("job", (j) => j?.id === jobId && this.changes.notify()),
      stream.on("reset", () => this.changes.notify()),
    ];
  }

  stop() {
    this.stopped = true;
    this.changes.notify();
  }

  // result reads the job at the instance's job path until it is finished
  // (each read answers as soon as it is, within 30 s); between reads it
  // waits for the stream to say the job changed. null when stopped.
  async result(instanceId: string): Promise<JobResult | null> {
    try {
      return await awaitJob(
        async (wait) =>
          (await ok(
            api.GET("/api/v1/databases/{id}/jobs/{job_id}", { params: { path: { id: instanceId, job_id: this.jobId }, query: { wait } } }),
          )) as JobResult,
        () => this.changes.next(),
        () => this.stopped,
      );
    } finally {
      this.offs.forEach((off) => off());
    }
  }
}

// dbCall queues a database call and returns its finished job (the result
// of a query, explore or key-value call).
export async function dbCall(instanceId: string, queue: () => Promise<{ job_id: string }>, wait?: (w: Waiting) => void): Promise<JobResult> {
  const { job_id } = await queue();
  const w = new Waiting(job_id);
  wait?.(w);
  const r = await w.result(instanceId);
  if (!r) throw new Error("stopped waiting");
  return r;
}

export interface Followed {
  id: string;
  label: string;
  type: string;
  status: string;
  error: string | null;
  data: unknown;
  events: { at: string; level: string; message: string; seq?: number }[];
}

// useFollowed keeps the jobs a screen started (an export, a login being
// created) current from the stream: state changes and, for
// administrators, their progress events; a finished job is read once
// more for its outcome.
export function useFollowed(onFinished?: (j: Followed) => void) {
  const [jobs, setJobs] = useState<Followed[]>([]);
  const read = async (id: string) => {
    const j = await readJob(id);
    setJobs((list) =>
      list.map((f) => (f.id === id ? { ...f, status: j.status, error: j.error, data: j.data, events: mergeEvents(f.events, j.events ?? []) } : f)),
    );
    if (finished(j.status)) onFinished?.({ id, label: "", type: j.type, status: j.status, error: j.error, data: j.data, events: [] });
  };
  useLive(["job", "job.events"], (data, type) => {
    if (type === "reset") {
      for (const f of jobs) if (!finished(f.status)) void read(f.id).catch(() => {});
      return;
    }
    if (type === "job" && jobs.some((f) => f.id === data?.id)) {
      if (finished(data.status)) void read(data.id).catch(() => {});
      else setJobs((list) => list.map((f) => (f.id === data.id ? { ...f, status: data.status } : f)));
    }
    if (type === "job.events") {
      setJobs((list) => list.map((f) => (f.id === data?.job_id ? { ...f, events: mergeEvents(f.events, data.events ?? []) } : f)));
    }
  }, [jobs]);
  const follow = (job: Job, label: string) => {
    const j = newestJob(job);
    setJobs((list) => [
      { id: j.id, label, type: j.type, status: j.status, error: j.error, data: j.data, events: [] },
      ...list.filter((f) => f.id !== j.id),
    ]);
    // A job that finished before its answer came is read for its outcome.
    if (finished(j.status)) void read(j.id).catch(() => {});
  };
  return { jobs, follow };
}

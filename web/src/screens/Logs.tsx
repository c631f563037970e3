import { useEffect, useRef, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { ProblemBox } from "../components/ui";
import { newestJob, useLive } from "../lib/live";
import { asProblem, type Problem } from "../lib/problem";

type Line = Schemas["LogLine"];

// FOLLOW_PAUSE is the pause between two reads while following: each read
// is a job on the server.
const FOLLOW_PAUSE = 2000;
const MAX_LINES = 2000;

// Logs reads a unit's journal or a container's log through log-read jobs,
// continuing after the cursor of the previous read (no repeats, no gaps),
// and keeps reading while "Follow" is on. Each read's end comes from the
// stream.
export function Logs({ serverId, units, containers }: { serverId: string; units: string[]; containers: string[] }) {
  const sources = [...containers.map((c) => `container:${c}`), ...units.map((u) => `journal:${u}`)];
  const [source, setSource] = useState(sources[0] ?? "");
  const [lines, setLines] = useState<Line[]>([]);
  const [follow, setFollow] = useState(false);
  const [problem, setProblem] = useState<Problem | null>(null);
  const [reading, setReading] = useState<string | null>(null); // job id
  const cursor = useRef("");
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  const box = useRef<HTMLPreElement>(null);
  const readingRef = useRef<string | null>(null);
  const followRef = useRef(follow);
  followRef.current = follow;

  useEffect(() => {
    cursor.current = "";
    setLines([]);
    return () => {
      if (timer.current) clearTimeout(timer.current);
    };
  }, [source]);

  async function read() {
    if (!source || reading) return;
    const [kind, name] = [source.slice(0, source.indexOf(":")), source.slice(source.indexOf(":") + 1)];
    try {
      const res = await ok(
        api.POST("/api/v1/logs", {
          body: {
            server_id: serverId, source: kind, lines: 200, cursor: cursor.current || undefined,
            ...(kind === "container" ? { container: name } : { unit: name }),
          },
        }),
      );
      setReading(res.job_id);
      readingRef.current = res.job_id;
      setProblem(null);
      // A fast read may have finished before its request returned.
      if (["succeeded", "failed", "cancelled"].includes(newestJob(res.job).status)) void collect(res.job_id);
    } catch (err) {
      setProblem(asProblem(err));
      setFollow(false);
    }
  }

  async function collect(jobId: string) {
    if (readingRef.current !== jobId) return; // collected already
    readingRef.current = null;
    try {
      const r = await ok(api.GET("/api/v1/logs/{job_id}", { params: { path: { job_id: jobId } } }));
      if (r.error) setProblem({ title: "The read failed", status: 0, detail: r.error });
      if (r.cursor) cursor.current = r.cursor;
      if (r.lines?.length) setLines((cur) => [...cur, ...r.lines!].slice(-MAX_LINES));
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setReading(null);
      if (followRef.current) timer.current = setTimeout(() => void read(), FOLLOW_PAUSE);
    }
  }

  useLive(["job"], (data, type) => {
    const id = readingRef.current;
    if (!id) return;
    if (type === "reset" || (data?.id === id && ["succeeded", "failed", "cancelled"].includes(data.status))) void collect(id);
  });

  useEffect(() => {
    if (follow && !reading) void read();
    if (!follow && timer.current) clearTimeout(timer.current);
  }, [follow]);

  useEffect(() => {
    const el = box.current;
    if (el) el.scrollTop = el.scrollHeight;
  }, [lines]);

  if (sources.length === 0) return <p class="muted">No units or containers reported to read.</p>;
  return (
    <div class="card">
      <div class="row wrap">
        <label>
          <span class="sr-only">Log source</span>
          <select value={source} onChange={(e) => setSource((e.target as HTMLSelectElement).value)}>
            {sources.map((s) => (
              <option key={s} value={s}>
                {s.replace(":", ": ")}
              </option>
            ))}
          </select>
        </label>
        <button type="button" onClick={() => void read()} disabled={!!reading}>
          {reading ? "Reading…" : lines.length ? "Read more" : "Read"}
        </button>
        <label class="row">
          <input type="checkbox" checked={follow} onChange={(e) => setFollow((e.target as HTMLInputElement).checked)} /> Follow
        </label>
      </div>
      <ProblemBox problem={problem} />
      <pre class="log" ref={box} aria-live="off" aria-label="Log lines" tabIndex={0}>
        {lines.length === 0 ? "No lines read yet." : lines.map((l) => `${new Date(l.at).toLocaleTimeString()}  ${l.message}`).join("\n")}
      </pre>
    </div>
  );
}

import { useEffect, useRef, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { ProblemBox } from "../components/ui";
import { LogFilter } from "../components/LogFilter";
import { filterLines, lineText } from "../lib/logs";
import { asProblem, type Problem } from "../lib/problem";

type Line = Schemas["LogLine"];

// FOLLOW_PAUSE is the pause between two reads while following: each read
// is a job on the server.
const FOLLOW_PAUSE = 2000;
const MAX_LINES = 2000;
// WAIT is how long one request waits for a read to end (the API's ?wait=).
const WAIT = 25;

// Logs reads a unit's journal or a container's log through log-read jobs:
// the last lines as soon as a source is chosen, then, while "Follow" is
// on, what came since (each read continues after the cursor of the one
// before: no repeats, no gaps). Each read's lines come in the request that
// waits for it to end. The lines read are filtered in the browser, by text
// and by priority.
export function Logs({ serverId, units, containers }: { serverId: string; units: string[]; containers: string[] }) {
  const sources = [...containers.map((c) => `container:${c}`), ...units.map((u) => `journal:${u}`)];
  const [source, setSource] = useState(sources[0] ?? "");
  const [lines, setLines] = useState<Line[]>([]);
  const [follow, setFollow] = useState(false);
  const [problem, setProblem] = useState<Problem | null>(null);
  const [reading, setReading] = useState(false);
  const [text, setText] = useState("");
  const [priority, setPriority] = useState("");
  const cursor = useRef("");
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  const box = useRef<HTMLPreElement>(null);
  const busy = useRef(false);
  const followRef = useRef(follow);
  followRef.current = follow;
  const sourceRef = useRef(source);
  sourceRef.current = source;

  useEffect(() => {
    cursor.current = "";
    setLines([]);
    void read(); // the last lines, at once
    return () => {
      if (timer.current) clearTimeout(timer.current);
    };
  }, [source]);

  async function read() {
    const from = sourceRef.current;
    if (!from || busy.current) return;
    busy.current = true;
    setReading(true);
    const [kind, name] = [from.slice(0, from.indexOf(":")), from.slice(from.indexOf(":") + 1)];
    try {
      const res = await ok(
        api.POST("/api/v1/logs", {
          body: {
            server_id: serverId, source: kind, lines: 200, cursor: cursor.current || undefined,
            ...(kind === "container" ? { container: name } : { unit: name }),
          },
        }),
      );
      let r: Schemas["Result"] | undefined;
      // A read that outlasts one wait is waited for again.
      for (let i = 0; i < 4 && (!r || !["succeeded", "failed", "cancelled"].includes(r.status)); i++) {
        r = await ok(api.GET("/api/v1/logs/{job_id}", { params: { path: { job_id: res.job_id }, query: { wait: WAIT } } }));
      }
      if (sourceRef.current !== from) return; // another source was chosen meanwhile
      setProblem(r?.error ? { title: "The read failed", status: 0, detail: r.error } : null);
      if (r?.cursor) cursor.current = r.cursor;
      if (r?.lines?.length) setLines((cur) => [...cur, ...r!.lines!].slice(-MAX_LINES));
    } catch (err) {
      setProblem(asProblem(err));
      setFollow(false);
    } finally {
      busy.current = false;
      setReading(false);
      if (sourceRef.current !== from) void read(); // the source chosen while this one was read
      else if (followRef.current) timer.current = setTimeout(() => void read(), FOLLOW_PAUSE);
    }
  }

  useEffect(() => {
    if (follow) void read();
    if (!follow && timer.current) clearTimeout(timer.current);
  }, [follow]);

  const shown = filterLines(lines, text, priority === "" ? null : Number(priority));
  useEffect(() => {
    const el = box.current;
    if (el) el.scrollTop = el.scrollHeight;
  }, [shown.length]);

  if (sources.length === 0) return <p class="muted">No units or containers reported to read.</p>;
  const filtered = text.trim() !== "" || priority !== "";
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
        <button type="button" onClick={() => void read()} disabled={reading}>
          {reading ? "Reading…" : "Read more"}
        </button>
        <label class="row">
          <input type="checkbox" checked={follow} onChange={(e) => setFollow((e.target as HTMLInputElement).checked)} /> Follow
        </label>
        <LogFilter text={text} priority={priority} onText={setText} onPriority={setPriority} />
        {filtered && (
          <span class="muted" aria-live="polite">
            {shown.length} of {lines.length} lines
          </span>
        )}
      </div>
      <ProblemBox problem={problem} />
      <pre class="log" ref={box} aria-live="off" aria-label="Log lines" tabIndex={0}>
        {lines.length === 0
          ? reading
            ? "Reading the last lines…"
            : "No lines read yet."
          : shown.length === 0
            ? "No line matches the filter."
            : shown.map((l) => lineText(l)).join("\n")}
      </pre>
    </div>
  );
}

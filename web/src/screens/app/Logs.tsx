import { useEffect, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../../api/client";
import { Field, ProblemBox } from "../../components/ui";
import { Ago } from "../../components/Ago";
import { LogFilter } from "../../components/LogFilter";
import { filterLines } from "../../lib/logs";
import { asProblem, fieldErrors, type Problem } from "../../lib/problem";
import { useJobEnd } from "../../lib/useJob";

type Detail = Schemas["ApplicationDetail"];

// AppLogs reads the live container's (or the live slot's) log through a
// log-read job whose end the stream reports.
export function AppLogs({ app }: { app: Detail }) {
  const [lines, setLines] = useState("200");
  const [since, setSince] = useState("");
  const [service, setService] = useState(app.web_service ?? "");
  const [job, setJob] = useState<Schemas["Job"] | null>(null);
  const [read, setRead] = useState<Schemas["AppLogs"] | null>(null);
  const [problem, setProblem] = useState<Problem | null>(null);
  const errs = fieldErrors(problem);
  const [text, setText] = useState("");
  const [priority, setPriority] = useState("");
  // The last lines are read as soon as the tab opens.
  useEffect(() => void start(), []);
  useJobEnd(job, () => {
    if (!job) return;
    void ok(api.GET("/api/v1/applications/{id}/logs/{job_id}", { params: { path: { id: app.id, job_id: job.id } } }))
      .then(setRead)
      .catch((err) => setProblem(asProblem(err)));
  });
  async function start(e?: Event) {
    e?.preventDefault();
    setProblem(null);
    setRead(null);
    try {
      const body: Schemas["AppLogsInputBody"] = { lines: Number(lines) || undefined };
      if (since) body.since = new Date(since).toISOString();
      if (app.kind === "compose" && service) body.service = service;
      const a = await ok(api.POST("/api/v1/applications/{id}/logs", { params: { path: { id: app.id } }, body }));
      setJob(a.job);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  const reading = job && !read && !problem;
  return (
    <div class="card">
      <form class="row wrap logs-form" aria-label="Read the log" onSubmit={start} noValidate>
        {app.kind === "compose" && (
          <Field label="Service" name="log-service" errors={errs.service}>
            <select id="log-service" value={service} onChange={(e) => setService((e.target as HTMLSelectElement).value)}>
              {(app.services?.services ?? []).map((s) => (
                <option key={s.service} value={s.service}>
                  {s.service}
                </option>
              ))}
              {!(app.services?.services ?? []).length && <option value={service}>{service}</option>}
            </select>
          </Field>
        )}
        <Field label="Lines" name="log-lines" errors={errs.lines}>
          <input id="log-lines" inputMode="numeric" value={lines} onInput={(e) => setLines((e.target as HTMLInputElement).value)} />
        </Field>
        <Field label="Since" name="log-since" errors={errs.since}>
          <input id="log-since" type="datetime-local" value={since} onInput={(e) => setSince((e.target as HTMLInputElement).value)} />
        </Field>
        <button type="submit" class="primary" disabled={!!reading}>
          Read the log
        </button>
      </form>
      <ProblemBox problem={problem} fields={["lines", "since", "service"]} />
      {reading && (
        <p class="muted" aria-live="polite">
          <span class="spinner" aria-hidden="true" /> Reading on the server…
        </p>
      )}
      {read && (
        <>
          {read.error && <p class="lvl-error">{read.error}</p>}
          <p class="muted">
            {read.unit ? `Unit ${read.unit}` : "Container"} {read.state && `is ${read.state}`}
            {read.started_at && <>, started <Ago at={read.started_at} /></>}
            {read.restart_count ? `, restarted ${read.restart_count} times` : ""}
          </p>
          <div class="row wrap">
            <LogFilter text={text} priority={priority} onText={setText} onPriority={setPriority} />
          </div>
          <pre class="log" aria-label="Log lines" tabIndex={0}>
            {(read.lines ?? []).length === 0
              ? "No lines."
              : filterLines(read.lines ?? [], text, priority === "" ? null : Number(priority))
                  .map((l) => `${new Date(l.at).toLocaleTimeString()} ${l.stream === "stderr" ? "! " : ""}${l.message}`)
                  .join("\n") || "No line matches the filter."}
          </pre>
          {(read.slots ?? []).length > 0 && (
            <p class="muted">
              Slots:{" "}
              {(read.slots ?? []).map((s) => `${s.unit} ${s.active_state} (${s.sub_state})${s.live ? ", live" : ""}`).join("; ")}
            </p>
          )}
        </>
      )}
    </div>
  );
}

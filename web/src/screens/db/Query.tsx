import { useEffect, useRef, useState } from "preact/hooks";
import { api, ok } from "../../api/client";
import { ProblemBox, Table } from "../../components/ui";
import { cellText, errorAt, numericType, offsetOf, type JobResult } from "../../lib/db";
import { duration } from "../../lib/format";
import { asProblem, type Problem } from "../../lib/problem";
import { dbCall, type Instance, type Waiting } from "./run";

interface Result {
  columns: { name: string; type: string }[];
  rows: unknown[][];
  row_count: number;
  truncated: boolean;
  rows_affected?: number | null;
  duration_ms: number;
  notices?: string[] | null;
}

interface EngineError {
  code?: string;
  message: string;
  position?: number;
}

// Query is the query console: one statement, read-only unless the user
// turns that off (the engine enforces it), a bound on the rows, a timeout,
// and the result as a grid with the columns' types, or the engine's error
// with the place it points at marked in the statement.
export function Query({ inst }: { inst: Instance }) {
  const [sql, setSQL] = useState("");
  const [readonly, setReadonly] = useState(true);
  const [maxRows, setMaxRows] = useState(100);
  const [timeout, setTimeoutS] = useState(30);
  const [database, setDatabase] = useState(inst.database);
  const [running, setRunning] = useState<{ w: Waiting | null; since: number; jobId: string } | null>(null);
  const [elapsed, setElapsed] = useState(0);
  const [result, setResult] = useState<{ ran: string; readonly: boolean; r: Result } | null>(null);
  const [failure, setFailure] = useState<{ ran: string; readonly: boolean; e: EngineError } | null>(null);
  const [problem, setProblem] = useState<Problem | null>(null);
  const editor = useRef<HTMLTextAreaElement>(null);

  useEffect(() => {
    if (!running) return;
    const t = setInterval(() => setElapsed(Date.now() - running.since), 250);
    return () => clearInterval(t);
  }, [running]);

  async function run() {
    const statement = sql.trim();
    if (!statement || running) return;
    setProblem(null);
    setResult(null);
    setFailure(null);
    setElapsed(0);
    const since = Date.now();
    setRunning({ w: null, since, jobId: "" });
    try {
      const r: JobResult = await dbCall(
        inst.id,
        () =>
          ok(
            api.POST("/api/v1/databases/{id}/query", {
              params: { path: { id: inst.id } },
              body: { sql: statement, readonly, max_rows: maxRows, timeout_seconds: timeout, database: database.trim() || undefined },
            }),
          ),
        (w) => {
          setRunning({ w, since, jobId: w.jobId });
        },
      );
      if (r.status === "succeeded") setResult({ ran: statement, readonly, r: r.data as Result });
      else {
        const e = (r.data as { error?: EngineError } | null)?.error;
        setFailure({ ran: statement, readonly, e: e ?? { message: r.error ?? `The query ${r.status}.` } });
      }
    } catch (err) {
      if (!(err instanceof Error && err.message === "stopped waiting")) setProblem(asProblem(err));
    } finally {
      setRunning(null);
    }
  }

  // cancel cancels the query's job while it is queued; once the agent runs
  // it, the engine ends it at its timeout, and the console stops waiting.
  async function cancel() {
    if (!running) return;
    const { w, jobId } = running;
    if (jobId) {
      try {
        await ok(api.POST("/api/v1/jobs/{id}/cancel", { params: { path: { id: jobId } } }));
      } catch (err) {
        const p = asProblem(err);
        setProblem({ ...p, detail: `${p.detail} The statement goes on until it ends or its timeout (${timeout} s) ends it.`.trim() });
      }
    }
    w?.stop();
  }

  function showError(position: number) {
    const ta = editor.current;
    if (!ta || failure?.ran !== sql.trim()) return;
    const lead = sql.length - sql.trimStart().length;
    const at = lead + offsetOf(failure.ran, position);
    ta.focus();
    ta.setSelectionRange(at, at + (errorAt(failure.ran, position)?.at.length ?? 1));
  }

  const marked = failure ? errorAt(failure.ran, failure.e.position) : null;
  return (
    <div class="query">
      <form
        class="card"
        aria-label="Query console"
        onSubmit={(e) => {
          e.preventDefault();
          void run();
        }}
      >
        <div class="field">
          <label for="sql">Statement</label>
          <textarea
            id="sql"
            ref={editor}
            rows={6}
            spellcheck={false}
            class="mono"
            value={sql}
            aria-describedby="sql-hint"
            onInput={(e) => setSQL((e.currentTarget as HTMLTextAreaElement).value)}
            onKeyDown={(e) => {
              if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
                e.preventDefault();
                void run();
              }
            }}
          />
          <small id="sql-hint">One statement. Ctrl+Enter runs it.</small>
        </div>
        <div class="row wrap query-options">
          <label class="choice">
            <input type="checkbox" checked={readonly} onChange={(e) => setReadonly((e.currentTarget as HTMLInputElement).checked)} /> Read-only
          </label>
          <label>
            Max rows{" "}
            <input type="number" min={1} max={1000} value={maxRows} class="num-input"
              onInput={(e) => setMaxRows(Number((e.currentTarget as HTMLInputElement).value) || 100)} />
          </label>
          <label>
            Timeout (s){" "}
            <input type="number" min={1} max={300} value={timeout} class="num-input"
              onInput={(e) => setTimeoutS(Number((e.currentTarget as HTMLInputElement).value) || 30)} />
          </label>
          <label>
            Database <input value={database} class="db-input" onInput={(e) => setDatabase((e.currentTarget as HTMLInputElement).value)} />
          </label>
        </div>
        {!readonly && (
          <p class="lvl-warn" role="status">
            Read-only is off: this statement can change data.
          </p>
        )}
        <div class="row wrap">
          <button type="submit" class="primary" disabled={!!running || !sql.trim() || inst.state !== "ready"}>
            Run
          </button>
          {running && (
            <>
              <span role="status" class="muted">
                <span class="spinner" aria-hidden="true" /> Running… {duration(elapsed)}
              </span>
              <button type="button" class="danger" onClick={() => void cancel()}>
                Cancel
              </button>
            </>
          )}
        </div>
      </form>
      <ProblemBox problem={problem} />
      {failure && (
        <div class="problem query-error" role="alert">
          <strong>The engine refused the statement</strong>
          <p>
            {failure.e.message}
            {failure.e.code && <span class="muted"> (code {failure.e.code})</span>}
          </p>
          <p class="muted">It ran {failure.readonly ? "read-only" : "with read-only off"}.</p>
          {marked && (
            <>
              <pre class="sql-marked" aria-label={`Where the error is: character ${failure.e.position}`}>
                {marked.before}
                <mark>{marked.at}</mark>
                {marked.after}
              </pre>
              <button type="button" onClick={() => showError(failure.e.position!)} disabled={failure.ran !== sql.trim()}>
                Select it in the statement
              </button>
            </>
          )}
        </div>
      )}
      {result && <Grid r={result.r} readonly={result.readonly} />}
    </div>
  );
}

function Grid({ r, readonly }: { r: Result; readonly: boolean }) {
  const cols = r.columns ?? [];
  return (
    <div class="card">
      <p role="status" class="query-summary">
        {cols.length > 0 ? `${r.row_count} ${r.row_count === 1 ? "row" : "rows"}` : "Done"}
        {r.rows_affected != null && ` · ${r.rows_affected} affected`}
        {` · ${duration(r.duration_ms)}`}
        {readonly ? " · read-only" : ""}
        {r.truncated && <strong> · more rows than max rows: the rest were not fetched</strong>}
      </p>
      {(r.notices ?? []).map((n, i) => (
        <p key={i} class="muted">
          Notice: {n}
        </p>
      ))}
      {cols.length > 0 && (
        <div class="scroll-x grid-box">
          <Table label="Result" class="result-grid"
            columns={cols.map((c, i) => ({ label: c.name, note: c.type, class: numericType(c.type) ? "num" : undefined }))}>
            {(r.rows ?? []).map((row, i) => (
              <tr key={i}>
                {row.map((v, j) => (
                  <td key={j} class={(numericType(cols[j]?.type ?? "") ? "num" : "") + (v === null ? " null" : "")}>
                    {cellText(v)}
                  </td>
                ))}
              </tr>
            ))}
          </Table>
        </div>
      )}
    </div>
  );
}

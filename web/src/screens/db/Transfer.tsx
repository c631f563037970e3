import { useState } from "preact/hooks";
import { api, authedFetch, ok } from "../../api/client";
import { ProblemBox, StatusBadge, Table } from "../../components/ui";
import { accessToken, needsRefresh, refresh } from "../../lib/auth";
import { ago, bytes } from "../../lib/format";
import { asProblem, ProblemError, type Problem } from "../../lib/problem";
import { useResource } from "../../lib/resource";
import { JobLines } from "./JobLines";
import { useFollowed, type Instance, type Job } from "./run";
import { Ago } from "../../components/Ago";

// exportOf says whether a job is an export of the instance.
function exportOf(j: Job, id: string): boolean {
  const p = j.payload as { target?: { instance_id?: string } } | null;
  return j.type === "db.export" && p?.target?.instance_id === id;
}

// upload sends the file as the request body with the access token,
// reporting the bytes sent (fetch cannot report an upload's progress).
function upload(url: string, file: File, onProgress: (sent: number) => void): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", url);
    xhr.setRequestHeader("Authorization", `Bearer ${accessToken() ?? ""}`);
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.upload.onprogress = (e) => onProgress(e.loaded);
    xhr.onload = () => {
      let body: unknown = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        body = { title: "Upload failed", status: xhr.status, detail: xhr.responseText.slice(0, 200) };
      }
      resolve({ status: xhr.status, body });
    };
    xhr.onerror = () => reject(new Error("the upload was cut off"));
    xhr.send(file);
  });
}

// Transfer exports a database as .sql.gz and imports a file into one,
// with the job's progress live from the stream.
export function Transfer({ inst }: { inst: Instance }) {
  const exports = useResource(async () => {
    const r = await ok(api.GET("/api/v1/jobs", { params: { query: { server_id: inst.server_id, limit: 100 } } }));
    return (r.jobs ?? []).filter((j) => exportOf(j, inst.id));
  }, [inst.id]);
  const { jobs, follow } = useFollowed((j) => j.type === "db.export" && void exports.reload());
  const [problem, setProblem] = useState<Problem | null>(null);
  const [exportDB, setExportDB] = useState(inst.database);
  const [importDB, setImportDB] = useState(inst.database);
  const [file, setFile] = useState<File | null>(null);
  const [sent, setSent] = useState<number | null>(null);

  async function startExport(e: Event) {
    e.preventDefault();
    setProblem(null);
    try {
      const a = await ok(api.POST("/api/v1/databases/{id}/export", { params: { path: { id: inst.id } }, body: { database: exportDB.trim() || undefined } }));
      follow(a.job, `export ${exportDB || inst.database}`);
      void exports.reload();
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  async function download(j: Job) {
    setProblem(null);
    try {
      const res = await authedFetch(new Request(`/api/v1/databases/${inst.id}/exports/${j.id}`));
      if (!res.ok) throw new ProblemError(asProblem(await res.json().catch(() => null), res.status));
      const name = /filename="([^"]+)"/.exec(res.headers.get("Content-Disposition") ?? "")?.[1] ?? `${inst.name}.sql.gz`;
      const url = URL.createObjectURL(await res.blob());
      const a = document.createElement("a");
      a.href = url;
      a.download = name;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  async function startImport(e: Event) {
    e.preventDefault();
    if (!file) return;
    setProblem(null);
    setSent(0);
    try {
      if (needsRefresh()) await refresh();
      const q = importDB.trim() ? `?database=${encodeURIComponent(importDB.trim())}` : "";
      const r = await upload(`/api/v1/databases/${inst.id}/import${q}`, file, setSent);
      if (r.status !== 202) throw new ProblemError(asProblem(r.body, r.status));
      const a = r.body as { job: Job };
      follow(a.job, `import ${file.name} into ${importDB || inst.database}`);
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setSent(null);
    }
  }

  const ready = inst.state === "ready";
  return (
    <div>
      <ProblemBox problem={problem} />
      <JobLines jobs={jobs} />
      <div class="grid2">
        <form class="card form" aria-label="Export a database" onSubmit={startExport}>
          <h2>Export</h2>
          <p class="muted">The engine's dump tool writes plain SQL, compressed with gzip; the control plane keeps it encrypted for a week.</p>
          <div class="field">
            <label for="export-db">Database</label>
            <input id="export-db" value={exportDB} onInput={(e) => setExportDB((e.currentTarget as HTMLInputElement).value)} />
          </div>
          <div>
            <button type="submit" class="primary" disabled={!ready}>
              Export
            </button>
          </div>
        </form>
        <form class="card form" aria-label="Import a file" onSubmit={startImport}>
          <h2>Import</h2>
          <p class="muted">
            Plain SQL, .sql.gz{inst.engine === "postgres" ? " or a custom-format dump (pg_dump -Fc)" : ""}.{" "}
            {inst.engine === "postgres"
              ? "PostgreSQL loads it in one transaction: if anything fails, nothing is applied."
              : "MySQL and MariaDB stop at the first error: what ran before it stays."}
          </p>
          <div class="field">
            <label for="import-file">File</label>
            <input id="import-file" type="file" accept=".sql,.gz,.dump,application/gzip,application/sql"
              onChange={(e) => setFile((e.currentTarget as HTMLInputElement).files?.[0] ?? null)} />
          </div>
          <div class="field">
            <label for="import-db">Into database</label>
            <input id="import-db" value={importDB} onInput={(e) => setImportDB((e.currentTarget as HTMLInputElement).value)} />
          </div>
          {sent !== null && file && (
            <p role="status">
              <progress max={file.size} value={sent} aria-label="Upload" /> {bytes(sent)} of {bytes(file.size)} sent
            </p>
          )}
          <div>
            <button type="submit" class="primary" disabled={!ready || !file || sent !== null}>
              Import
            </button>
          </div>
        </form>
      </div>
      <div class="card scroll-x">
        <h2>Exports</h2>
        <ProblemBox problem={exports.problem} />
        <Table label="Exports" columns={["Database", "State", "Made", { label: "Size", class: "num" }, { label: "Download", hidden: true }]}>
          {(exports.data ?? []).map((j) => {
            const d = j.data as { bytes?: number } | null;
            const p = j.payload as { database?: string } | null;
            return (
              <tr key={j.id} data-export={j.id}>
                <td>{p?.database ?? inst.database}</td>
                <td>
                  <StatusBadge status={j.status} />
                </td>
                <td><Ago at={j.finished_at ?? j.created_at} /></td>
                <td class="num">{d?.bytes != null ? bytes(d.bytes) : "–"}</td>
                <td>
                  {j.status === "succeeded" && (
                    <button type="button" onClick={() => void download(j)} aria-label={`Download the export of ${p?.database ?? inst.database} ${ago(j.finished_at)}`}>
                      Download
                    </button>
                  )}
                </td>
              </tr>
            );
          })}
        </Table>
        {exports.data?.length === 0 && <p class="muted">No exports of this instance among the server's recent jobs.</p>}
      </div>
    </div>
  );
}

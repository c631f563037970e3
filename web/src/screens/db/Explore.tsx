import { useState } from "preact/hooks";
import { api, ok } from "../../api/client";
import { Loading, ProblemBox, Table } from "../../components/ui";
import { bytes } from "../../lib/format";
import { useAction } from "../../lib/action";
import { dbCall, type Instance } from "./run";

interface Explored {
  what: string;
  databases?: { name: string; owner?: string; size_bytes: number }[];
  users?: { name: string; superuser: boolean; can_login: boolean; grants: string[] | null }[];
  stats?: { version: string; uptime_seconds: number; connections: number; max_connections: number; cache_hit_ratio: number | null; role: string };
  tables?: { schema?: string; name: string; estimated_rows: number; total_bytes: number; index_bytes: number }[];
  columns?: { name: string; type: string; nullable: boolean; default: string | null; primary_key: boolean; references?: string; indexes: string[] | null }[];
}

type What = "tables" | "databases" | "users" | "stats";

// explore runs one explore call and returns its data, or throws the
// engine's error as a problem.
export async function explore(inst: Instance, body: { what: string; database?: string; schema?: string; table?: string }): Promise<Explored> {
  const r = await dbCall(inst.id, () => ok(api.POST("/api/v1/databases/{id}/explore", { params: { path: { id: inst.id } }, body })));
  if (r.status !== "succeeded") throw { title: `Explore ${r.status}`, status: 0, detail: r.error ?? "" };
  return r.data as Explored;
}

// Explore describes a SQL instance: its tables and their columns, its
// databases, users with grants, and its statistics.
export function Explore({ inst }: { inst: Instance }) {
  const [what, setWhat] = useState<What>("tables");
  const [database, setDatabase] = useState(inst.database);
  const [schema, setSchema] = useState(inst.engine === "postgres" ? "public" : "");
  const [data, setData] = useState<Explored | null>(null);
  const [columns, setColumns] = useState<{ table: string; data: Explored } | null>(null);
  const { busy, problem, run } = useAction();

  function load(w: What) {
    setWhat(w);
    return run(async () => {
      setColumns(null);
      // database and schema apply to tables (and columns) only.
      const scope = w === "tables" ? { database: database.trim() || undefined, schema: schema.trim() || undefined } : {};
      setData(await explore(inst, { what: w, ...scope }));
    });
  }

  function open(table: string, tableSchema?: string) {
    return run(async () => {
      const d = await explore(inst, { what: "columns", table, database: database.trim() || undefined, schema: tableSchema || schema.trim() || undefined });
      setColumns({ table: tableSchema ? `${tableSchema}.${table}` : table, data: d });
    });
  }

  return (
    <div>
      <div class="card row wrap">
        <label>
          Database <input class="db-input" value={database} onInput={(e) => setDatabase((e.currentTarget as HTMLInputElement).value)} />
        </label>
        {inst.engine === "postgres" && (
          <label>
            Schema <input class="db-input" value={schema} onInput={(e) => setSchema((e.currentTarget as HTMLInputElement).value)} />
          </label>
        )}
        <div class="row wrap" role="group" aria-label="What to describe">
          {(["tables", "databases", "users", "stats"] as What[]).map((w) => (
            <button key={w} type="button" aria-pressed={data?.what === w} class={data?.what === w ? "primary" : ""} disabled={busy}
              onClick={() => void load(w)}>
              {{ tables: "Tables", databases: "Databases", users: "Users", stats: "Statistics" }[w]}
            </button>
          ))}
        </div>
      </div>
      <ProblemBox problem={problem} />
      {busy && <Loading what={what === "tables" && data?.what === "tables" ? "columns" : what} />}
      {!data && !busy && <p class="muted">Pick what to describe.</p>}
      {data?.what === "tables" && (
        <div class="card scroll-x">
          <Table label="Tables" columns={["Table", { label: "Rows (estimate)", class: "num" }, { label: "Size", class: "num" }, { label: "Indexes", class: "num" }]}>
            {(data.tables ?? []).map((t) => (
              <tr key={`${t.schema}.${t.name}`}>
                <td>
                  <button type="button" class="linklike" onClick={() => void open(t.name, t.schema)}>
                    {t.schema ? `${t.schema}.` : ""}
                    {t.name}
                  </button>
                </td>
                <td class="num">{t.estimated_rows}</td>
                <td class="num">{bytes(t.total_bytes)}</td>
                <td class="num">{bytes(t.index_bytes)}</td>
              </tr>
            ))}
          </Table>
          {!data.tables?.length && <p class="muted">No tables.</p>}
        </div>
      )}
      {columns && (
        <div class="card scroll-x">
          <h2>Columns of {columns.table}</h2>
          <Table label={`Columns of ${columns.table}`} columns={["Column", "Type", "Null", "Default", "Key", "Indexes"]}>
            {(columns.data.columns ?? []).map((c) => (
              <tr key={c.name}>
                <td>{c.name}</td>
                <td>
                  <code>{c.type}</code>
                </td>
                <td>{c.nullable ? "yes" : "no"}</td>
                <td>{c.default ?? "–"}</td>
                <td>{[c.primary_key ? "primary" : "", c.references ? `→ ${c.references}` : ""].filter(Boolean).join(" ") || "–"}</td>
                <td>{(c.indexes ?? []).join(", ") || "–"}</td>
              </tr>
            ))}
          </Table>
        </div>
      )}
      {data?.what === "databases" && (
        <div class="card scroll-x">
          <Table label="Databases" columns={["Database", "Owner", { label: "Size", class: "num" }]}>
            {(data.databases ?? []).map((d) => (
              <tr key={d.name}>
                <td>{d.name}</td>
                <td>{d.owner ?? "–"}</td>
                <td class="num">{bytes(d.size_bytes)}</td>
              </tr>
            ))}
          </Table>
        </div>
      )}
      {data?.what === "users" && (
        <div class="card scroll-x">
          <Table label="Users" columns={["User", "Superuser", "Can log in", "Grants"]}>
            {(data.users ?? []).map((u) => (
              <tr key={u.name}>
                <td>{u.name}</td>
                <td>{u.superuser ? "yes" : "no"}</td>
                <td>{u.can_login ? "yes" : "no"}</td>
                <td class="grants">{(u.grants ?? []).join("; ") || "–"}</td>
              </tr>
            ))}
          </Table>
        </div>
      )}
      {data?.what === "stats" && data.stats && (
        <div class="card">
          <dl class="facts">
            <dt>Version</dt>
            <dd>{data.stats.version}</dd>
            <dt>Up for</dt>
            <dd>{Math.floor(data.stats.uptime_seconds / 3600)} h</dd>
            <dt>Connections</dt>
            <dd>
              {data.stats.connections} of {data.stats.max_connections}
            </dd>
            <dt>Cache hit ratio</dt>
            <dd>{data.stats.cache_hit_ratio == null ? "–" : `${(data.stats.cache_hit_ratio * 100).toFixed(1)}%`}</dd>
            <dt>Role</dt>
            <dd>{data.stats.role}</dd>
          </dl>
        </div>
      )}
    </div>
  );
}

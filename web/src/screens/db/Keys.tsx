import { Fragment } from "preact";
import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../../api/client";
import { Loading, ProblemBox, Table, useConfirm } from "../../components/ui";
import { kvRows, ttlText, type KVValue } from "../../lib/db";
import { bytes } from "../../lib/format";
import { asProblem, type Problem } from "../../lib/problem";
import { dbCall, type Instance } from "./run";

interface KVResult {
  action: string;
  info?: Record<string, Record<string, string>>;
  cursor?: string;
  keys?: { key: string; type: string; ttl_seconds: number }[];
  value?: KVValue;
  deleted?: number;
  acl_users?: { name: string; enabled: boolean; key_patterns: string[] | null; commands: string }[];
}

async function kv(inst: Instance, body: Schemas["KvInputBody"]): Promise<KVResult> {
  const r = await dbCall(inst.id, () => ok(api.POST("/api/v1/databases/{id}/kv", { params: { path: { id: inst.id } }, body })));
  if (r.status !== "succeeded") throw { title: `The ${body.action} call ${r.status}`, status: 0, detail: r.error ?? "" };
  return r.data as KVResult;
}

// Keys browses a Redis/Valkey instance: keys by pattern (SCAN, page by
// page), each key's value by its type with its TTL, deleting keys, the
// server's INFO and its ACL users.
export function Keys({ inst }: { inst: Instance }) {
  const [db, setDB] = useState(0);
  const [match, setMatch] = useState("*");
  const [keys, setKeys] = useState<KVResult["keys"]>(undefined);
  const [cursor, setCursor] = useState("0");
  const [value, setValue] = useState<KVValue | null>(null);
  const [extra, setExtra] = useState<KVResult | null>(null);
  const [busy, setBusy] = useState("");
  const [problem, setProblem] = useState<Problem | null>(null);
  const confirm = useConfirm((key: string) => ({ title: "Delete a key", action: "Delete", object: key, run: () => remove(key) }));
  const [note, setNote] = useState("");

  async function step<T>(what: string, fn: () => Promise<T>): Promise<T | undefined> {
    setBusy(what);
    setProblem(null);
    try {
      return await fn();
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setBusy("");
    }
  }

  async function scan(from: string) {
    const r = await step("keys", () => kv(inst, { action: "scan", db, match: match || "*", cursor: from, count: 200 }));
    if (!r) return;
    setKeys((have) => [...(from === "0" ? [] : (have ?? [])), ...(r.keys ?? [])]);
    setCursor(r.cursor ?? "0");
    setExtra(null);
    if (from === "0") setValue(null);
  }

  async function open(key: string) {
    const r = await step("the value", () => kv(inst, { action: "get", db, key, max_items: 500, max_bytes: 256 * 1024 }));
    if (r?.value) setValue(r.value);
  }

  async function remove(key: string) {
    const r = await step("", () => kv(inst, { action: "delete", db, keys: [key] }));
    if (!r) return;
    setNote(r.deleted ? `Deleted ${key}.` : `${key} was gone already.`);
    setKeys((have) => (have ?? []).filter((k) => k.key !== key));
    if (value?.key === key) setValue(null);
  }

  const rows = value ? kvRows(value) : null;
  return (
    <div class="keys">
      <form
        class="card row wrap"
        aria-label="Find keys"
        onSubmit={(e) => {
          e.preventDefault();
          void scan("0");
        }}
      >
        <label>
          Database{" "}
          <select value={db} onChange={(e) => setDB(Number((e.currentTarget as HTMLSelectElement).value))}>
            {Array.from({ length: 16 }, (_, i) => (
              <option key={i} value={i}>
                {i}
              </option>
            ))}
          </select>
        </label>
        <label class="grow-label">
          Pattern <input value={match} onInput={(e) => setMatch((e.currentTarget as HTMLInputElement).value)} aria-describedby="match-hint" />
        </label>
        <small id="match-hint" class="muted">
          A glob: * any, ? one character.
        </small>
        <button type="submit" class="primary" disabled={!!busy || inst.state !== "ready"}>
          Find keys
        </button>
        <button type="button" disabled={!!busy} onClick={() => void step("info", async () => setExtra(await kv(inst, { action: "info" })))}>
          Server info
        </button>
        <button type="button" disabled={!!busy} onClick={() => void step("ACL users", async () => setExtra(await kv(inst, { action: "acl_list" })))}>
          ACL users
        </button>
      </form>
      <ProblemBox problem={problem} />
      {note && (
        <p role="status" class="muted">
          {note}
        </p>
      )}
      {busy && <Loading what={busy} />}
      <div class="kv-panes">
        {keys && (
          <div class="card scroll-x">
            <Table label="Keys" columns={["Key", "Type", "TTL", { label: "Actions", hidden: true }]}>
              {keys.map((k) => (
                <tr key={k.key} aria-current={value?.key === k.key ? "true" : undefined}>
                  <td>
                    <button type="button" class="linklike" onClick={() => void open(k.key)}>
                      {k.key}
                    </button>
                  </td>
                  <td>
                    <span class={"kvtype t-" + k.type}>{k.type}</span>
                  </td>
                  <td>{ttlText(k.ttl_seconds)}</td>
                  <td>
                    <button type="button" class="danger small" aria-label={`Delete ${k.key}`} onClick={() => confirm.ask(k.key)}>
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </Table>
            {keys.length === 0 && <p class="muted">No keys match {match}.</p>}
            {cursor !== "0" && (
              <button type="button" disabled={!!busy} onClick={() => void scan(cursor)}>
                More keys
              </button>
            )}
          </div>
        )}
        {value && rows && (
          <div class="card scroll-x" aria-label={`Value of ${value.key}`} role="region">
            <h2 class="kv-key">{value.key}</h2>
            <p class="muted">
              {value.type} · {value.size} {value.type === "string" ? "bytes" : "items"} · {ttlText(value.ttl_seconds)}
              {value.truncated && <strong> · shown in part</strong>}
            </p>
            {value.type === "string" ? (
              <pre class="kv-string">{value.string}</pre>
            ) : (
              <Table label={`Items of ${value.key}`} columns={rows.columns}>
                {rows.rows.map((r, i) => (
                  <tr key={i}>
                    {r.map((c, j) => (
                      <td key={j}>{c}</td>
                    ))}
                  </tr>
                ))}
              </Table>
            )}
          </div>
        )}
      </div>
      {extra?.action === "info" && (
        <div class="card">
          <h2>Server info</h2>
          <div class="grid2">
            {Object.entries(extra.info ?? {}).map(([section, kvs]) => (
              <div key={section}>
                <h3>{section}</h3>
                <dl class="facts">
                  {Object.entries(kvs).map(([k, v]) => (
                    <Fragment key={k}>
                      <dt>{k}</dt>
                      <dd>{k.endsWith("_memory") && /^\d+$/.test(v) ? `${v} (${bytes(Number(v))})` : v}</dd>
                    </Fragment>
                  ))}
                </dl>
              </div>
            ))}
          </div>
        </div>
      )}
      {extra?.action === "acl_list" && (
        <div class="card scroll-x">
          <Table label="ACL users" columns={["User", "Enabled", "Keys", "Commands"]}>
            {(extra.acl_users ?? []).map((u) => (
              <tr key={u.name}>
                <td>{u.name}</td>
                <td>{u.enabled ? "yes" : "no"}</td>
                <td>{(u.key_patterns ?? []).join(" ") || "–"}</td>
                <td>
                  <code>{u.commands}</code>
                </td>
              </tr>
            ))}
          </Table>
        </div>
      )}
      {confirm.dialog}
    </div>
  );
}

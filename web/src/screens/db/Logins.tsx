import { useState } from "preact/hooks";
import { api, ok } from "../../api/client";
import { CopyButton, Field, ProblemBox, StatusBadge, Table, useConfirm } from "../../components/ui";
import { bytes } from "../../lib/format";
import { asProblem, fieldErrors, type Problem } from "../../lib/problem";
import { explore } from "./Explore";
import { JobLines } from "./JobLines";
import { useFollowed, type Instance } from "./run";

type Pending = { kind: "drop-login" | "rotate" | "drop-db"; name: string; credentialId?: string };

// Logins lists an instance's logins (user names only) and, for
// administrators, creates, rotates and drops them, showing a new password
// once with a copy button; on SQL engines it also creates and drops
// databases.
export function Logins({ inst, admin, reload }: { inst: Instance; admin: boolean; reload: () => Promise<void> }) {
  // A finished job changes the logins, or the databases.
  const { jobs, follow } = useFollowed((j) => {
    void reload();
    if (j.type.startsWith("db.database.")) void loadDatabases();
  });
  const [secret, setSecret] = useState<{ username: string; password: string; url: string } | null>(null);
  const [problem, setProblem] = useState<Problem | null>(null);
  const confirm = useConfirm((p: Pending) => ({
    title: { "drop-login": "Drop a login", rotate: "Give a login a new password", "drop-db": "Drop a database and its data" }[p.kind],
    action: { "drop-login": "Drop", rotate: "Replace the password of", "drop-db": "Drop" }[p.kind],
    object: p.name,
    run: () => act(p),
  }));
  const [dbs, setDbs] = useState<{ name: string; owner?: string; size_bytes: number }[] | null>(null);
  const sql = inst.kind === "sql";

  async function act(p: Pending) {
    setProblem(null);
    try {
      if (p.kind === "drop-login") {
        const a = await ok(api.DELETE("/api/v1/databases/{id}/users/{username}", { params: { path: { id: inst.id, username: p.name } } }));
        follow(a.job, `drop login ${p.name}`);
      } else if (p.kind === "rotate") {
        const s = await ok(
          api.POST("/api/v1/databases/{id}/users/{credential_id}/rotate", { params: { path: { id: inst.id, credential_id: p.credentialId! } } }),
        );
        setSecret({ username: p.name, password: s.password, url: s.url });
        follow(s.job, `new password for ${p.name}`);
      } else {
        const a = await ok(api.DELETE("/api/v1/databases/{id}/databases/{name}", { params: { path: { id: inst.id, name: p.name } } }));
        follow(a.job, `drop database ${p.name}`);
      }
      await reload();
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  async function loadDatabases() {
    setProblem(null);
    try {
      setDbs((await explore(inst, { what: "databases" })).databases ?? []);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  const logins = inst.logins ?? [];
  return (
    <div>
      <ProblemBox problem={problem} />
      {secret && (
        <div class="card once" role="region" aria-label="New password">
          <h2>Password of {secret.username}</h2>
          <p>
            <strong>Shown once.</strong> Copy it now: later only the audited connection details show it.
          </p>
          <p>
            <code class="secret" id="new-password">
              {secret.password}
            </code>{" "}
            <CopyButton text={secret.password} label="Copy the password" />
          </p>
          <p>
            <code class="secret">{secret.url}</code> <CopyButton text={secret.url} label="Copy the URL" />
          </p>
          <button type="button" onClick={() => setSecret(null)}>
            I have saved it
          </button>
        </div>
      )}
      <JobLines jobs={jobs} />
      <div class="card scroll-x">
        <h2>Logins</h2>
        <Table label="Logins" columns={["Login", "Access", sql ? "Database" : "Keys", "State", admin && "Actions"]}>
          {logins.map((l) => (
            <tr key={l.credential_id} data-login={l.username}>
              <td>{l.username}</td>
              <td>{l.access}</td>
              <td>{sql ? l.database || "–" : l.key_pattern || "–"}</td>
              <td>
                <StatusBadge status={l.rotating ? "rotating" : l.state} />
              </td>
              {admin && (
                <td>
                  {l.access !== "admin" && (
                    <div class="actions">
                      <button type="button" aria-label={`New password for ${l.username}`} disabled={l.state !== "ready" || l.rotating}
                        onClick={() => confirm.ask({ kind: "rotate", name: l.username, credentialId: l.credential_id })}>
                        New password
                      </button>
                      <button type="button" class="danger" aria-label={`Drop ${l.username}`} disabled={l.state === "dropping"}
                        onClick={() => confirm.ask({ kind: "drop-login", name: l.username })}>
                        Drop
                      </button>
                    </div>
                  )}
                </td>
              )}
            </tr>
          ))}
        </Table>
      </div>
      {admin && (
        <CreateLogin
          inst={inst}
          onCreated={(s) => {
            setSecret({ username: s.login.username, password: s.password, url: s.url });
            follow(s.job, `create login ${s.login.username}`);
            void reload();
          }}
        />
      )}
      {admin && sql && (
        <div class="card">
          <div class="row wrap between">
            <h2>Databases</h2>
            <button type="button" onClick={() => void loadDatabases()} disabled={inst.state !== "ready"}>
              {dbs ? "Reload the databases" : "Show the databases"}
            </button>
          </div>
          {dbs && (
            <div class="scroll-x">
              <Table label="Databases of the instance" columns={["Database", "Owner", { label: "Size", class: "num" }, { label: "Actions", hidden: true }]}>
                {dbs.map((d) => (
                  <tr key={d.name}>
                    <td>{d.name}</td>
                    <td>{d.owner ?? "–"}</td>
                    <td class="num">{bytes(d.size_bytes)}</td>
                    <td>
                      {d.name !== inst.database && (
                        <button type="button" class="danger small" aria-label={`Drop database ${d.name}`}
                          onClick={() => confirm.ask({ kind: "drop-db", name: d.name })}>
                          Drop
                        </button>
                      )}
                    </td>
                  </tr>
                ))}
              </Table>
            </div>
          )}
          <CreateDatabase inst={inst} onQueued={(j, name) => follow(j, `create database ${name}`)} />
        </div>
      )}
      {confirm.dialog}
    </div>
  );
}

function CreateLogin({ inst, onCreated }: { inst: Instance; onCreated: (s: import("../../api/client").Schemas["LoginSecret"]) => void }) {
  const [problem, setProblem] = useState<Problem | null>(null);
  const errs = fieldErrors(problem);
  const sql = inst.kind === "sql";
  async function submit(e: Event) {
    e.preventDefault();
    const form = e.currentTarget as HTMLFormElement;
    const f = new FormData(form);
    const s = (k: string) => String(f.get(k) ?? "").trim();
    setProblem(null);
    try {
      const r = await ok(
        api.POST("/api/v1/databases/{id}/users", {
          params: { path: { id: inst.id } },
          body: { username: s("username"), access: s("access"), ...(sql ? { database: s("database") } : { key_pattern: s("key_pattern") }) },
        }),
      );
      form.reset();
      onCreated(r);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  return (
    <form class="card form" aria-label="Create a login" onSubmit={submit} noValidate>
      <h2>Create a login</h2>
      <ProblemBox problem={problem} fields={["username", "access", "database", "key_pattern"]} />
      <Field label="User name" name="login-username" errors={errs.username} hint="Letters, digits and _.">
        <input id="login-username" name="username" autoComplete="off" aria-invalid={errs.username ? true : undefined} />
      </Field>
      {sql ? (
        <Field label="Database" name="login-database" errors={errs.database}>
          <input id="login-database" name="database" defaultValue={inst.database} aria-invalid={errs.database ? true : undefined} />
        </Field>
      ) : (
        <Field label="Key pattern" name="login-key-pattern" errors={errs.key_pattern} hint="The keys it may use, e.g. shop:*">
          <input id="login-key-pattern" name="key_pattern" aria-invalid={errs.key_pattern ? true : undefined} />
        </Field>
      )}
      <Field label="Access" name="login-access" errors={errs.access}>
        <select id="login-access" name="access">
          <option value="readonly">readonly</option>
          <option value="readwrite">readwrite</option>
          {sql && <option value="admin">admin</option>}
        </select>
      </Field>
      <div>
        <button type="submit" class="primary" disabled={inst.state !== "ready"}>
          Create the login
        </button>
      </div>
    </form>
  );
}

function CreateDatabase({ inst, onQueued }: { inst: Instance; onQueued: (j: import("./run").Job, name: string) => void }) {
  const [problem, setProblem] = useState<Problem | null>(null);
  const errs = fieldErrors(problem);
  async function submit(e: Event) {
    e.preventDefault();
    const form = e.currentTarget as HTMLFormElement;
    const f = new FormData(form);
    const name = String(f.get("name") ?? "").trim();
    const owner = String(f.get("owner") ?? "").trim();
    setProblem(null);
    try {
      const a = await ok(api.POST("/api/v1/databases/{id}/databases", { params: { path: { id: inst.id } }, body: { name, owner: owner || undefined } }));
      form.reset();
      onQueued(a.job, name);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  return (
    <form class="form" aria-label="Create a database" onSubmit={submit} noValidate>
      <h3>Create a database</h3>
      <ProblemBox problem={problem} fields={["name", "owner"]} />
      <Field label="Name" name="newdb-name" errors={errs.name}>
        <input id="newdb-name" name="name" aria-invalid={errs.name ? true : undefined} />
      </Field>
      <Field label="Owner" name="newdb-owner" errors={errs.owner} hint="Optional: a login of the instance.">
        <select id="newdb-owner" name="owner">
          <option value="">the admin login</option>
          {(inst.logins ?? [])
            .filter((l) => l.access !== "admin")
            .map((l) => (
              <option key={l.username} value={l.username}>
                {l.username}
              </option>
            ))}
        </select>
      </Field>
      <div>
        <button type="submit" disabled={inst.state !== "ready"}>
          Create the database
        </button>
      </div>
    </form>
  );
}

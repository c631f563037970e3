import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { BackLink, Field, Link, Loading, ProblemBox, StatusBadge, Table } from "../components/ui";
import { currentUser } from "../lib/auth";
import { memoryLimit } from "../lib/db";
import { bytes } from "../lib/format";
import { useLive } from "../lib/live";
import { useAction } from "../lib/action";
import { useResource } from "../lib/resource";
import { navigate } from "../lib/router";
import "./databases.css";
import { useTitle } from "../lib/title";

type Engine = Schemas["Engine"];

// An instance's state changes when one of its jobs ends: the list reloads
// when a database job finishes.
function useDatabaseJobs(reload: () => void) {
  useLive(["job"], (data, type) => {
    if (type === "reset" || (String(data?.type ?? "").startsWith("db.") && ["succeeded", "failed", "cancelled"].includes(data.status)))
      reload();
  });
}

// Databases lists the instances, external and managed, with their state
// and newest figures.
export function Databases() {
  useTitle("Databases");
  const res = useResource(async () => {
    const [dbs, servers] = await Promise.all([ok(api.GET("/api/v1/databases")), ok(api.GET("/api/v1/servers"))]);
    return { dbs: dbs.databases ?? [], servers: new Map((servers.servers ?? []).map((s) => [s.id, s.name])) };
  });
  useDatabaseJobs(() => void res.reload());
  const admin = currentUser()?.admin ?? false;
  const data = res.data;
  return (
    <section>
      <div class="row wrap between">
        <h1>Databases</h1>
        {admin && (
          <Link href="/databases/new" class="button primary">
            Add an instance
          </Link>
        )}
      </div>
      <ProblemBox problem={res.problem} />
      {!data && !res.problem && <Loading what="databases" />}
      {data && (
        <div class="card scroll-x">
          <Table label="Database instances" columns={["Name", "Engine", "State", "Server", "Kind", "Connections", "Size"]}>
            {data.dbs.map((d) => (
              <tr key={d.id} data-instance={d.name}>
                <td>
                  <Link href={"/databases/" + d.id}>{d.name}</Link>
                </td>
                <td>
                  {d.engine} {d.version}
                </td>
                <td>
                  <StatusBadge status={d.state} />
                </td>
                <td>
                  <Link href={"/servers/" + d.server_id}>{data.servers.get(d.server_id) ?? d.server_id}</Link>
                </td>
                <td>{d.managed ? "managed" : "external"}</td>
                <td>{d.last_metrics?.connections ?? "–"}</td>
                <td>{d.kind === "kv" ? `${d.last_metrics?.keys ?? "–"} keys` : bytes(d.last_metrics?.size_bytes)}</td>
              </tr>
            ))}
          </Table>
          {data.dbs.length === 0 && (
            <p class="muted">No database instances yet.{admin ? " Add one: create a managed instance or register one that runs elsewhere." : ""}</p>
          )}
        </div>
      )}
    </section>
  );
}

const externalFields = ["name", "server_id", "engine", "host", "port", "username", "password", "database", "tls_mode", "ca"];
const managedFields = ["name", "server_id", "engine", "version", "database", "memory_limit"];

// NewDatabase creates a managed instance or registers an external one,
// then opens it, where its first job is followed live.
export function NewDatabase() {
  useTitle("New instance", "Databases");
  const res = useResource(async () => {
    const [engines, servers] = await Promise.all([ok(api.GET("/api/v1/databases/engines")), ok(api.GET("/api/v1/servers"))]);
    return { engines: engines.engines ?? [], servers: servers.servers ?? [] };
  });
  const [mode, setMode] = useState<"managed" | "external">("managed");
  const [engine, setEngine] = useState("postgres");
  const { problem, setProblem, busy, errs, handleSubmit } = useAction();
  const data = res.data;
  const eng: Engine | undefined = data?.engines.find((e) => e.name === engine);
  const sql = (eng?.kind ?? "sql") === "sql";

  const submit = handleSubmit(async (e) => {
    const f = new FormData(e.currentTarget as HTMLFormElement);
    const s = (k: string) => String(f.get(k) ?? "").trim();
    let reg;
    if (mode === "managed") {
      const mem = memoryLimit(s("memory_limit"));
      if (Number.isNaN(mem)) {
        setProblem({ title: "Check the form", status: 422, detail: "", errors: [{ field: "memory_limit", message: "a number of MiB" }] });
        return;
      }
      reg = await ok(
        api.POST("/api/v1/databases", {
          body: { name: s("name"), server_id: s("server_id"), engine, version: s("version") || undefined,
            database: sql ? s("database") || undefined : undefined, memory_limit: mem },
        }),
      );
    } else {
      const port = s("port");
      reg = await ok(
        api.POST("/api/v1/databases/external", {
          body: { name: s("name"), server_id: s("server_id"), engine, host: s("host"), port: port ? Number(port) : undefined,
            username: s("username") || undefined, password: String(f.get("password") ?? "") || undefined,
            database: sql ? s("database") || undefined : undefined, tls_mode: s("tls_mode"), ca: s("ca") || undefined },
        }),
      );
    }
    navigate("/databases/" + reg.instance.id);
  });

  if (!data) return res.problem ? <ProblemBox problem={res.problem} /> : <Loading what="engines and servers" />;
  const inv = (k: string) => (errs[k] ? true : undefined);
  return (
    <section class="db-new">
      <BackLink href="/databases" label="Databases" />
      <h1>Add a database instance</h1>
      <div class="row wrap" role="radiogroup" aria-label="How">
        {(
          [
            ["managed", "Create a managed instance"],
            ["external", "Register an external instance"],
          ] as const
        ).map(([m, label]) => (
          <label key={m} class="choice">
            <input type="radio" name="mode" checked={mode === m} onChange={() => (setMode(m), setProblem(null))} /> {label}
          </label>
        ))}
      </div>
      <form onSubmit={submit} class="card form" aria-label={mode === "managed" ? "New managed instance" : "New external instance"} noValidate>
        <p class="muted">
          {mode === "managed"
            ? "The server's agent runs the engine as a container, with its port on 127.0.0.1 only; Capstan makes the admin password."
            : "An instance that runs elsewhere: the agent on the server you pick connects to it (the control plane never does)."}
        </p>
        <ProblemBox problem={problem} fields={mode === "managed" ? managedFields : externalFields} />
        <Field label="Name" name="name" errors={errs.name} hint="Lowercase letters, digits and dashes, e.g. shop.">
          <input id="name" name="name" required autoFocus aria-invalid={inv("name")} />
        </Field>
        <Field label="Server" name="server_id" errors={errs.server_id} hint={mode === "external" ? "Its agent connects to the instance." : undefined}>
          <select id="server_id" name="server_id" aria-invalid={inv("server_id")}>
            {data.servers.map((s) => (
              <option key={s.id} value={s.id}>
                {s.name} ({s.status})
              </option>
            ))}
          </select>
        </Field>
        <Field label="Engine" name="engine" errors={errs.engine}>
          <select id="engine" name="engine" value={engine} onChange={(e) => setEngine((e.currentTarget as HTMLSelectElement).value)}>
            {data.engines.map((e) => (
              <option key={e.name} value={e.name}>
                {e.name}
              </option>
            ))}
          </select>
        </Field>
        {mode === "managed" ? (
          <>
            <Field label="Version" name="version" errors={errs.version}>
              <select id="version" name="version" key={engine}>
                {(eng?.versions ?? []).map((v) => (
                  <option key={v.version} value={v.version} selected={v.default}>
                    {v.version}
                    {v.default ? " (default)" : ""} — {v.image}
                  </option>
                ))}
              </select>
            </Field>
            {sql && (
              <Field label="Initial database" name="database" errors={errs.database} hint="Lowercase letters, digits and _.">
                <input id="database" name="database" aria-invalid={inv("database")} />
              </Field>
            )}
            <Field label="Memory limit (MiB)" name="memory_limit" errors={errs.memory_limit} hint="Optional, 64 MiB or more.">
              <input id="memory_limit" name="memory_limit" inputMode="numeric" aria-invalid={inv("memory_limit")} />
            </Field>
          </>
        ) : (
          <>
            <div class="grid2 tight">
              <Field label="Host" name="host" errors={errs.host} hint="As the server reaches it.">
                <input id="host" name="host" aria-invalid={inv("host")} />
              </Field>
              <Field label="Port" name="port" errors={errs.port} hint={eng ? `Default ${eng.default_port}.` : undefined}>
                <input id="port" name="port" inputMode="numeric" aria-invalid={inv("port")} />
              </Field>
            </div>
            <Field label="User name" name="username" errors={errs.username} hint={sql ? undefined : "Default: default."}>
              <input id="username" name="username" autoComplete="off" aria-invalid={inv("username")} />
            </Field>
            <Field label="Password" name="password" errors={errs.password} hint="Stored encrypted; never shown here again.">
              <input id="password" name="password" type="password" autoComplete="new-password" aria-invalid={inv("password")} />
            </Field>
            {sql && (
              <Field label="Database" name="database" errors={errs.database}>
                <input id="database" name="database" aria-invalid={inv("database")} />
              </Field>
            )}
            <Field label="TLS" name="tls_mode" errors={errs.tls_mode}>
              <select id="tls_mode" name="tls_mode">
                <option value="verify-full">verify-full: TLS, CA and host name checked</option>
                <option value="verify-ca">verify-ca: TLS, CA checked</option>
                <option value="require">require: TLS, certificate not checked</option>
                <option value="disable">disable: plain</option>
              </select>
            </Field>
            <Field label="CA certificate (PEM)" name="ca" errors={errs.ca} hint="For verify-ca and verify-full; the system's roots when empty.">
              <textarea id="ca" name="ca" rows={3} aria-invalid={inv("ca")} />
            </Field>
          </>
        )}
        <div class="row">
          <button type="submit" class="primary" disabled={busy}>
            {mode === "managed" ? "Create the instance" : "Register and test"}
          </button>
          <Link href="/databases" class="button">
            Cancel
          </Link>
        </div>
      </form>
    </section>
  );
}

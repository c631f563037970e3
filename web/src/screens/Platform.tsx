import { useState } from "preact/hooks";
import { api, ok } from "../api/client";
import { Field, Link, Loading, ProblemBox, Table } from "../components/ui";
import { agentSummary, kitFileName } from "../lib/admin";
import { currentUser } from "../lib/auth";
import { useAction } from "../lib/action";
import { asProblem, ProblemError } from "../lib/problem";
import { useResource } from "../lib/resource";
import "./admin.css";
import { useTitle } from "../lib/title";

// Platform: this control plane's versions and the fleet's agents by
// version, the recovery kit, and where API tokens and users are managed.
export function Platform() {
  useTitle("Platform");
  const res = useResource(() => ok(api.GET("/api/v1/platform")));
  const p = res.data;
  const agents = p?.agents ?? [];
  const sum = agentSummary(agents);
  return (
    <section class="admin">
      <h1>Platform</h1>
      <ProblemBox problem={res.problem} />
      {!p && !res.problem && <Loading what="the platform" />}
      {p && (
        <div class="grid2">
          <div class="card">
            <h2>Control plane</h2>
            <dl class="facts">
              <dt>Version</dt>
              <dd>
                <code data-version>{p.version}</code>
              </dd>
              <dt>Public URL</dt>
              <dd>{p.public_url}</dd>
              <dt>API</dt>
              <dd>{p.api}</dd>
              <dt>Agent protocol</dt>
              <dd>{p.agent_protocol}</dd>
              <dt>Store</dt>
              <dd>
                {p.schema.dialect === "postgres" ? "PostgreSQL" : "SQLite"}, schema version {p.schema.version}
              </dd>
            </dl>
          </div>
          <div class="card">
            <h2>Agents</h2>
            {agents.length === 0 ? (
              <p class="muted">No enrolled servers yet.</p>
            ) : (
              <>
                <p>
                  {sum.behind === 0
                    ? `Every enrolled server runs the newest agent reported${sum.newest ? ` (${sum.newest})` : ""}.`
                    : `${sum.behind} ${sum.behind === 1 ? "server runs" : "servers run"} an older agent than ${sum.newest || "the newest"}.`}
                </p>
                <div class="scroll-x">
                  <Table label="Agents by version" columns={["Agent version", "Servers", "Online"]}>
                    {agents.map((a) => (
                      <tr key={a.version} data-agent-version={a.version}>
                        <td>
                          <code>{a.version || "unknown"}</code>
                        </td>
                        <td>{a.servers}</td>
                        <td>{a.online}</td>
                      </tr>
                    ))}
                  </Table>
                </div>
              </>
            )}
          </div>
        </div>
      )}
      {currentUser()?.admin ? <RecoveryKit /> : <p class="muted">The recovery kit is for administrators.</p>}
      <div class="card">
        <h2>API tokens</h2>
        <p>
          <Link href="/platform/tokens">{currentUser()?.admin ? "Manage API tokens" : "Your API tokens"}</Link>: tokens for pipelines and
          scripts that call the API as you, with the scopes you choose{currentUser()?.admin ? "" : " (a member's token reads)"}, narrowed to
          applications, servers or database instances if you like. Each secret is shown once.
        </p>
      </div>
      <div class="card">
        <h2>Users</h2>
        {currentUser()?.admin && (
          <p>
            <Link href="/platform/users">Manage users</Link>: invitations, roles, disabling, second factors.
          </p>
        )}
        <p>
          Administrators invite new users from the Users screen. On the control plane's host, with the same{" "}
          <code>--data-dir</code> or <code>--database-url</code> as{" "}
          <code>capstan serve</code>:
        </p>
        <ul>
          <li>
            <code>capstan user create --email you@example.com --admin</code> makes an administrator (without <code>--admin</code>, a member who
            reads but changes nothing); it shows the new user's authenticator secret once.
          </li>
          <li>
            <code>capstan user unlock --email you@example.com</code> lifts the lock after 100 failed sign-ins in a row.
          </li>
        </ul>
      </div>
    </section>
  );
}

function RecoveryKit() {
  const [password, setPassword] = useState("");
  const { problem, busy, errs, handleSubmit } = useAction();
  const [saved, setSaved] = useState<string | null>(null);

  const download = handleSubmit(async () => {
    setSaved(null);
    const { data, error, response } = await api.POST("/api/v1/platform/recovery-kit", { body: { password }, parseAs: "blob" });
    if (error !== undefined || !response.ok || !data) throw new ProblemError(asProblem(error, response.status));
    const name = kitFileName(response.headers.get("Content-Disposition"));
    const url = URL.createObjectURL(data as Blob);
    const a = document.createElement("a");
    a.href = url;
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
    setPassword("");
    setSaved(name);
  });

  return (
    <div class="card kit">
      <h2>Recovery kit</h2>
      <p>
        Every secret this control plane keeps (authenticator secrets, environment values, database passwords, channel destinations, backups and
        exports) is encrypted with its secret key. Without the key they cannot be read, not even from a backup of the database. The recovery kit
        holds the key, the public URL and the schema version, encrypted with your password.
      </p>
      <ul>
        <li>Keep it off this machine: in a password manager or an offline store, apart from the database's backups.</li>
        <li>It opens with the password you give here. If you change that password later, the kit still needs the old one.</li>
        <li>
          To see what it holds: <code>capstan recovery-kit open --file kit.age</code> (the password on standard input). To restore, start a
          new control plane with the key it holds (<code>CAPSTAN_SECRET_KEY</code>) on the restored database.
        </li>
        <li>Each download is recorded in the audit log.</li>
      </ul>
      <form class="form" onSubmit={download} aria-label="Download the recovery kit">
        <ProblemBox problem={problem} fields={["password"]} />
        <Field label="Your password" name="kit-password" errors={errs.password} hint="It is checked again, and encrypts the kit.">
          <input id="kit-password" type="password" autoComplete="current-password" required value={password}
            onInput={(e) => setPassword((e.target as HTMLInputElement).value)} />
        </Field>
        <div class="row">
          <button type="submit" class="primary" disabled={busy || !password}>
            {busy ? "Preparing…" : "Download the recovery kit"}
          </button>
        </div>
      </form>
      {saved && (
        <p class="result ok" role="status">
          Downloaded <code>{saved}</code>. Store it somewhere safe, away from this server.
        </p>
      )}
    </div>
  );
}

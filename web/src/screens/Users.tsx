import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { CopyButton, Loading, ProblemBox, StatusBadge, useConfirm } from "../components/ui";
import { currentUser } from "../lib/auth";
import { ago } from "../lib/format";
import { asProblem, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import "./admin.css";

type User = Schemas["User"];

// A user change the administrator confirms.
type Change = { user: User; kind: "role" | "disable" | "enable" | "reset" | "delete" };

// Users: every person with access, with role, state and last sign-in, and
// the administrator's changes: role, disable and enable, a new second
// factor (its secret shown once), delete. The API refuses to leave no
// enabled administrator, and says so here.
export function Users() {
  const res = useResource(async () => (await ok(api.GET("/api/v1/users"))).users ?? [], []);
  const [problem, setProblem] = useState<Problem | null>(null);
  const [secret, setSecret] = useState<{ email: string; secret: string; uri: string } | null>(null);
  const me = currentUser();

  async function run(c: Change) {
    setProblem(null);
    setSecret(null);
    const path = { params: { path: { id: c.user.id } } };
    try {
      switch (c.kind) {
        case "role":
          await ok(api.PATCH("/api/v1/users/{id}", { ...path, body: { admin: !c.user.admin } }));
          break;
        case "disable":
        case "enable":
          await ok(api.PATCH("/api/v1/users/{id}", { ...path, body: { disabled: c.kind === "disable" } }));
          break;
        case "reset": {
          const r = await ok(api.POST("/api/v1/users/{id}/reset-2fa", path));
          setSecret({ email: c.user.email, secret: r.totp_secret, uri: r.totp_uri });
          break;
        }
        case "delete":
          await ok(api.DELETE("/api/v1/users/{id}", path));
          break;
      }
    } catch (err) {
      setProblem(asProblem(err));
    }
    await res.reload();
  }

  const confirm = useConfirm<Change>((c) => {
    const who = c.user.email;
    switch (c.kind) {
      case "role":
        return c.user.admin
          ? { title: "Make a member", object: who, action: "Make a member", run: () => run(c),
            children: <p>A member reads the fleet but changes nothing, and never reads secrets or job output.</p> }
          : { title: "Make an administrator", object: who, action: "Make an administrator", run: () => run(c),
            children: <p>An administrator may do everything, including managing users.</p> };
      case "disable":
        return { title: "Disable the user", object: who, action: "Disable", run: () => run(c),
          children: <p>Every session of the user ends at once, and its password no longer signs in, until enabled again.</p> };
      case "enable":
        return { title: "Enable the user", object: who, action: "Enable", run: () => run(c) };
      case "reset":
        return { title: "Reset the second factor", object: who, action: "Reset the second factor", run: () => run(c),
          children: <p>The user's authenticator code stops working and every session ends. The new secret is shown here once: hand it to the user.</p> };
      case "delete":
        return { title: "Delete the user", object: who, action: "Delete", run: () => run(c),
          children: <p>The user, its sessions and its inbox are deleted; what it did stays in the audit log.</p> };
    }
  });

  const list = res.data;
  return (
    <section class="admin" aria-labelledby="users-title">
      <h1 id="users-title">Users</h1>
      <p class="muted users-note">
        Administrators may do everything; members read the fleet and change nothing. The last enabled administrator always stays one.
        New users are created on the control plane's host: <code>capstan user create --email you@example.com</code>.
      </p>
      <ProblemBox problem={problem ?? res.problem} />
      {secret && (
        <div class="card" role="status" aria-label="New second factor">
          <h2>New second factor of {secret.email}</h2>
          <p>Shown once: add it to the user's authenticator app (the URI is what a QR code holds).</p>
          <dl class="facts">
            <dt>Secret</dt>
            <dd class="mono" data-totp-secret>{secret.secret}</dd>
            <dt>URI</dt>
            <dd class="mono">{secret.uri}</dd>
          </dl>
          <CopyButton text={secret.secret} label="Copy the secret" />
        </div>
      )}
      {!list && !res.problem && <Loading what="users" />}
      {list && (
        <ul class="users" aria-label="Users">
          {list.map((u) => (
            <li key={u.id} class="card" data-user={u.email}>
              <div class="row wrap between">
                <strong title={u.id}>
                  {u.email}
                  {u.id === me?.id && <span class="muted"> (you)</span>}
                </strong>
                <span class="row">
                  <span data-role>{u.admin ? "administrator" : "member"}</span>
                  <StatusBadge status={u.disabled ? "disabled" : "enabled"} />
                </span>
              </div>
              <p class="muted">Last sign-in: {u.last_sign_in_at ? ago(u.last_sign_in_at) : "never"}</p>
              <div class="row wrap">
                <button type="button" onClick={() => confirm.ask({ user: u, kind: "role" })}>
                  {u.admin ? "Make a member" : "Make an administrator"}
                </button>
                <button type="button" onClick={() => confirm.ask({ user: u, kind: u.disabled ? "enable" : "disable" })}>
                  {u.disabled ? "Enable" : "Disable"}
                </button>
                <button type="button" onClick={() => confirm.ask({ user: u, kind: "reset" })}>
                  Reset the second factor
                </button>
                <button type="button" class="danger" onClick={() => confirm.ask({ user: u, kind: "delete" })}>
                  Delete
                </button>
              </div>
            </li>
          ))}
        </ul>
      )}
      {confirm.dialog}
    </section>
  );
}

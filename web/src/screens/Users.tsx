import { useRef, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { CopyButton, Field, Loading, ProblemBox, StatusBadge, useConfirm } from "../components/ui";
import { currentUser } from "../lib/auth";
import { Ago } from "../components/Ago";
import { useAction } from "../lib/action";
import { asProblem, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import "./admin.css";
import { useTitle } from "../lib/title";

type User = Schemas["User"];
type Invitation = Schemas["Invitation"];

// A user change the administrator confirms.
type Change = { user: User; kind: "role" | "disable" | "enable" | "reset" | "delete" };

// Users: every person with access, with role, state and last sign-in, and
// the administrator's changes: role, disable and enable, a new second
// factor (its secret shown once), delete. The API refuses to leave no
// enabled administrator, and says so here.
export function Users() {
  useTitle("Users", "Platform");
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
        Invite new users here; they choose their password and set up their second factor themselves. On the control plane's
        host, <code>capstan user create --email you@example.com</code> creates one directly.
      </p>
      <Invitations onAccepted={() => void res.reload()} />
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
              <p class="muted">Last sign-in: <Ago at={u.last_sign_in_at} /></p>
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

// Invitations: the form that invites someone (the link is mailed, or shown
// here once to hand over when no SMTP server is set) and the invitations
// pending or closed lately, pending ones with revoke.
function Invitations({ onAccepted }: { onAccepted: () => void }) {
  const res = useResource(async () => (await ok(api.GET("/api/v1/users/invitations"))).invitations ?? [], []);
  const { problem, setProblem, busy, errs, run } = useAction();
  const [sent, setSent] = useState<{ email: string; delivery: string; link?: string } | null>(null);
  const email = useRef<HTMLInputElement>(null);
  const role = useRef<HTMLSelectElement>(null);

  async function submit(e: Event) {
    e.preventDefault();
    setSent(null);
    await run(async () => {
      const r = await ok(api.POST("/api/v1/users/invitations", {
        body: { email: email.current!.value.trim(), admin: role.current!.value === "admin" },
      }));
      setSent({ email: r.invitation.email, delivery: r.delivery, link: r.link });
      email.current!.value = "";
    });
    await res.reload();
    onAccepted();
  }

  async function revoke(inv: Invitation) {
    setProblem(null);
    setSent(null);
    try {
      await ok(api.DELETE("/api/v1/users/invitations/{id}", { params: { path: { id: inv.id } } }));
    } catch (err) {
      setProblem(asProblem(err));
    }
    await res.reload();
  }

  const confirm = useConfirm<Invitation>((inv) => ({
    title: "Revoke the invitation", object: inv.email, action: "Revoke", run: () => revoke(inv),
    children: <p>The invitation link stops working at once. You can invite the address again.</p>,
  }));

  const list = res.data;
  return (
    <div class="card invitations">
      <h2>Invite someone</h2>
      <form class="row wrap invite-form" onSubmit={submit} aria-label="Invite a user" noValidate>
        <Field label="E-mail" name="invite-email" errors={errs.email}>
          <input ref={email} id="invite-email" name="invite-email" type="email" required autoComplete="off"
            aria-invalid={errs.email ? true : undefined} />
        </Field>
        <Field label="Role" name="invite-role">
          <select ref={role} id="invite-role" name="invite-role">
            <option value="member">Member</option>
            <option value="admin">Administrator</option>
          </select>
        </Field>
        <button type="submit" class="primary" disabled={busy}>
          Invite
        </button>
      </form>
      <ProblemBox problem={problem ?? res.problem} fields={["email"]} />
      {sent && sent.delivery === "email" && (
        <p class="result ok" role="status">
          The invitation was e-mailed to {sent.email}. Its link works once, for 72 hours.
        </p>
      )}
      {sent && sent.link && (
        <div class="secret-once" role="status" aria-label="Invitation link">
          <p>
            No SMTP server is set: hand this link to {sent.email} yourself. It is shown once, works once and for 72 hours.
          </p>
          <code data-invite-link>{sent.link}</code> <CopyButton text={sent.link} label="Copy the link" />
        </div>
      )}
      {!list && !res.problem && <Loading what="invitations" />}
      {list && list.length > 0 && (
        <>
          <h3>Invitations</h3>
          <ul class="users" aria-label="Invitations">
            {list.map((inv) => (
              <li key={inv.id} class="row wrap between" data-invitation={inv.email}>
                <span>
                  <strong>{inv.email}</strong> <span class="muted">{inv.admin ? "administrator" : "member"}</span>
                </span>
                <span class="row">
                  <StatusBadge status={inv.status} />
                  <span class="muted">
                    {inv.status === "pending" ? <>invited <Ago at={inv.created_at} /> by {inv.invited_by}</> : ""}
                  </span>
                  {inv.status === "pending" && (
                    <button type="button" onClick={() => confirm.ask(inv)}>
                      Revoke
                    </button>
                  )}
                </span>
              </li>
            ))}
          </ul>
        </>
      )}
      {confirm.dialog}
    </div>
  );
}

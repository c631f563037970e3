import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { BackLink, CopyButton, Field, Link, Loading, ProblemBox, StatusBadge, Table, useConfirm } from "../components/ui";
import { channelConfig, channelKinds, configFields, eventTypes, type ChannelKind } from "../lib/admin";
import { currentUser } from "../lib/auth";
import { navigate } from "../lib/router";
import { useAction } from "../lib/action";
import { asProblem, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import "./admin.css";
import { useTitle } from "../lib/title";

type Channel = Schemas["Channel"];
type ChannelDetailT = Schemas["ChannelDetail"];
type TestResult = Schemas["ChannelTestResult"];

// Notifications: the channels events go to (administrators), the
// control plane's e-mail and the caller's own e-mail preferences.
export function Notifications() {
  useTitle("Notifications");
  const admin = !!currentUser()?.admin;
  return (
    <section class="admin">
      <div class="row between wrap">
        <h1>Notification settings</h1>
        <Link href="/inbox">Inbox</Link>
      </div>
      {admin ? <Channels /> : <p class="muted">Notification channels and the SMTP settings are for administrators.</p>}
      <Email admin={admin} />
    </section>
  );
}

function Channels() {
  const res = useResource(async () => (await ok(api.GET("/api/v1/notifications/channels"))).channels ?? []);
  const [creating, setCreating] = useState(false);
  const [secret, setSecret] = useState<{ name: string; secret: string } | null>(null);
  return (
    <>
      <div class="row between wrap">
        <h2>Channels</h2>
        {!creating && (
          <button type="button" class="primary" onClick={() => setCreating(true)}>
            New channel
          </button>
        )}
      </div>
      <p class="muted">Chat rooms and other systems that receive events as they happen. Destinations are stored encrypted and never shown again.</p>
      {secret && <SecretOnce name={secret.name} secret={secret.secret} onDone={() => setSecret(null)} />}
      {creating && (
        <ChannelForm
          onCancel={() => setCreating(false)}
          onSaved={(ch) => {
            setCreating(false);
            if (ch.secret) setSecret({ name: ch.name, secret: ch.secret });
            void res.reload();
          }}
        />
      )}
      <ProblemBox problem={res.problem} />
      {!res.data && !res.problem && <Loading what="the channels" />}
      {res.data && res.data.length === 0 && !creating && <p class="card empty">No channels yet.</p>}
      {res.data && res.data.length > 0 && (
        <div class="card scroll-x">
          <Table label="Notification channels" columns={["Name", "Kind", "Events", "State"]}>
            {res.data.map((c: Channel) => (
              <tr key={c.id}>
                <td>
                  <Link href={"/notifications/channels/" + c.id}>{c.name}</Link>
                </td>
                <td>{kindLabel(c.kind)}</td>
                <td class="wrap-any">{(c.events ?? []).join(", ")}</td>
                <td>{c.enabled ? "Enabled" : <span class="muted">Disabled</span>}</td>
              </tr>
            ))}
          </Table>
        </div>
      )}
    </>
  );
}

function kindLabel(k: string) {
  return channelKinds.find((x) => x.kind === k)?.label ?? k;
}

// SecretOnce shows a webhook's signing secret, which no answer shows again.
function SecretOnce({ name, secret, onDone }: { name: string; secret: string; onDone: () => void }) {
  return (
    <div class="secret-once" role="status">
      <p>
        The signing secret of <strong>{name}</strong>. Copy it now: it is not shown again.
      </p>
      <p class="row wrap">
        <code data-secret>{secret}</code>
        <CopyButton text={secret} label="Copy secret" />
      </p>
      <button type="button" onClick={onDone}>
        I have copied it
      </button>
    </div>
  );
}

// ChannelForm creates a channel, or edits one (channel given): the
// destination's fields are write-only and left empty keep it.
function ChannelForm(props: {
  channel?: ChannelDetailT;
  onCancel: () => void;
  onSaved: (c: Channel & { secret?: string }) => void;
}) {
  const ch = props.channel;
  const [kind, setKind] = useState<ChannelKind>((ch?.kind as ChannelKind) ?? "webhook");
  const [name, setName] = useState(ch?.name ?? "");
  const [events, setEvents] = useState<string[]>(ch?.events ?? ["deploy.failed", "alert.opened", "server.offline"]);
  const [enabled, setEnabled] = useState(ch?.enabled ?? true);
  const [config, setConfig] = useState<Record<string, string>>({});
  const { problem, busy, errs, handleSubmit } = useAction();
  // "config.url" and the like: the field errors of the destination.
  const configErrs: Record<string, string[]> = {};
  for (const e of problem?.errors ?? []) {
    const m = /^(?:body\.)?config\.(\w+)/.exec(e.field);
    if (m) (configErrs[m[1]] ??= []).push(e.message);
  }
  const id = ch ? "edit" : "new";

  const submit = handleSubmit(async () => {
    const cfg = channelConfig(kind, config);
    const saved = ch
      ? await ok(
          api.PATCH("/api/v1/notifications/channels/{id}", {
            params: { path: { id: ch.id } },
            body: { name: name.trim(), events, enabled, ...(cfg ? { config: cfg } : {}) },
          }),
        )
      : await ok(api.POST("/api/v1/notifications/channels", { body: { kind, name: name.trim(), events, enabled, config: cfg ?? {} } }));
    props.onSaved(saved);
  });

  const known = ["name", "events", "enabled", "kind", "config"];
  return (
    <form class="card form" onSubmit={submit} aria-label={ch ? "Edit the channel" : "New channel"}>
      <h3>{ch ? `Edit ${ch.name}` : "New channel"}</h3>
      <ProblemBox problem={problem} fields={known} />
      {!ch && (
        <Field label="Kind" name={id + "-kind"} errors={errs.kind}>
          <select id={id + "-kind"} value={kind} onChange={(e) => setKind((e.target as HTMLSelectElement).value as ChannelKind)}>
            {channelKinds.map((k) => (
              <option key={k.kind} value={k.kind}>
                {k.label}: {k.hint}
              </option>
            ))}
          </select>
        </Field>
      )}
      <Field label="Name" name={id + "-name"} errors={errs.name}>
        <input id={id + "-name"} value={name} required maxLength={63} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
      </Field>
      {configFields(kind).map((f) => (
        <Field
          key={f.name}
          label={f.label}
          name={id + "-" + f.name}
          errors={configErrs[f.name]}
          hint={ch ? ((ch.config_set ?? []).includes(f.name) ? "Set. Leave empty to keep the destination; a new value replaces all of it." : "Not set.") : f.hint}
        >
          <input
            id={id + "-" + f.name}
            type="password"
            autoComplete="off"
            spellcheck={false}
            required={!ch && f.required}
            value={config[f.name] ?? ""}
            placeholder={ch && (ch.config_set ?? []).includes(f.name) ? "•••••• (unchanged)" : f.hint}
            onInput={(e) => setConfig({ ...config, [f.name]: (e.target as HTMLInputElement).value })}
          />
        </Field>
      ))}
      <fieldset>
        <legend>Events</legend>
        <div class="checks">
          {eventTypes.map((t) => (
            <label key={t}>
              <input
                type="checkbox"
                checked={events.includes(t)}
                onChange={(e) => setEvents((e.target as HTMLInputElement).checked ? [...events, t] : events.filter((x) => x !== t))}
              />
              {t}
            </label>
          ))}
        </div>
        {errs.events && (
          <small class="field-error" role="alert">
            {errs.events.join("; ")}
          </small>
        )}
      </fieldset>
      <label class="check">
        <input type="checkbox" checked={enabled} onChange={(e) => setEnabled((e.target as HTMLInputElement).checked)} />
        Enabled
      </label>
      <div class="row end">
        <button type="button" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="submit" class="primary" disabled={busy}>
          {ch ? "Save" : "Create channel"}
        </button>
      </div>
    </form>
  );
}

// ChannelDetail: a channel with its delivery log; edit, test, rotate a
// webhook's secret, delete.
export function ChannelDetail({ id }: { id: string }) {
  const res = useResource(() => ok(api.GET("/api/v1/notifications/channels/{id}", { params: { path: { id } } })), [id]);
  const ch = res.data;
  useTitle(ch?.name, "Notifications");
  const [editing, setEditing] = useState(false);
  const confirm = useConfirm((what: "delete" | "rotate") =>
    what === "delete"
      ? { title: "Delete the channel", action: "Delete", object: ch?.name ?? id, run: remove }
      : { title: "Rotate the signing secret", action: "Rotate the secret of", object: ch?.name ?? id, run: rotate });
  const [actionProblem, setProblem] = useState<Problem | null>(null);
  const [test, setTest] = useState<TestResult | null>(null);
  const [testing, setTesting] = useState(false);
  const [secret, setSecret] = useState<string | null>(null);
  const problem = actionProblem ?? res.problem;

  async function runTest() {
    setTesting(true);
    setTest(null);
    setProblem(null);
    try {
      setTest(await ok(api.POST("/api/v1/notifications/channels/{id}/test", { params: { path: { id } } })));
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setTesting(false);
    }
  }

  async function remove() {
    try {
      await ok(api.DELETE("/api/v1/notifications/channels/{id}", { params: { path: { id } } }));
      navigate("/notifications");
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  async function rotate() {
    try {
      const r = await ok(api.PATCH("/api/v1/notifications/channels/{id}", { params: { path: { id } }, body: { rotate_secret: true } }));
      if (r.secret) setSecret(r.secret);
      void res.reload();
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  if (!ch) return problem ? <ProblemBox problem={problem} /> : <Loading what="the channel" />;
  return (
    <section class="admin">
      <BackLink href="/notifications" label="Notification settings" />
      <div class="row wrap">
        <h1>{ch.name}</h1>
        <span class="muted">{kindLabel(ch.kind)}</span>
        {!ch.enabled && <span class="badge s-cancelled">disabled</span>}
      </div>
      <ProblemBox problem={problem} />
      {secret && <SecretOnce name={ch.name} secret={secret} onDone={() => setSecret(null)} />}
      <div class="row wrap">
        <button type="button" class="primary" disabled={testing} onClick={() => void runTest()}>
          {testing ? "Sending…" : "Send a test message"}
        </button>
        <button type="button" onClick={() => setEditing(!editing)} aria-expanded={editing}>
          Edit
        </button>
        {ch.kind === "webhook" && (
          <button type="button" onClick={() => confirm.ask("rotate")}>
            Rotate the signing secret
          </button>
        )}
        <button type="button" class="danger" onClick={() => confirm.ask("delete")}>
          Delete
        </button>
      </div>
      {test && (
        <div class={"result " + (test.delivered ? "ok" : "bad")} role="status" data-test-result={test.delivered ? "delivered" : "failed"}>
          <strong>{test.delivered ? "Delivered" : "Not delivered"}</strong>
          {test.response_code != null && <> · answer {test.response_code}</>} · {test.duration_ms} ms
          {test.error && <p>{test.error}</p>}
        </div>
      )}
      {editing && (
        <ChannelForm
          channel={ch}
          onCancel={() => setEditing(false)}
          onSaved={() => {
            setEditing(false);
            void res.reload();
          }}
        />
      )}
      <div class="card">
        <dl class="facts">
          <dt>Id</dt>
          <dd>
            <code>{ch.id}</code>
          </dd>
          <dt>Events</dt>
          <dd>{(ch.events ?? []).join(", ")}</dd>
          <dt>Destination</dt>
          <dd>{(ch.config_set ?? []).length ? `set (${(ch.config_set ?? []).join(", ")}), never shown` : "not set"}</dd>
          {ch.previous_secret_expires_at && (
            <>
              <dt>Previous secret</dt>
              <dd>signs too until {new Date(ch.previous_secret_expires_at).toLocaleString()}</dd>
            </>
          )}
          <dt>Created</dt>
          <dd>
            {new Date(ch.created_at).toLocaleString()}
            {ch.created_by ? ` by ${ch.created_by}` : ""}
          </dd>
        </dl>
      </div>
      <div class="row between wrap">
        <h2>Deliveries</h2>
        <button type="button" onClick={() => void res.reload()}>
          Refresh
        </button>
      </div>
      <p class="muted">The latest 50. A delivery that fails is retried with backoff for up to 24 hours.</p>
      {(ch.deliveries ?? []).length === 0 ? (
        <p class="card empty">No deliveries yet.</p>
      ) : (
        <div class="card scroll-x">
          <Table label="Deliveries" columns={["Event", "Status", "Attempts", "Answer", "Last attempt", "Error"]}>
            {(ch.deliveries ?? []).map((d) => (
              <tr key={d.id}>
                <td>{d.event_type}</td>
                <td>
                  <StatusBadge status={d.status === "delivered" ? "succeeded" : d.status === "failed" ? "failed" : "pending"} />
                  <span class="sr-only"> {d.status}</span>
                </td>
                <td>{d.attempts}</td>
                <td>{d.response_code ?? "–"}</td>
                <td>{d.last_attempt_at ? new Date(d.last_attempt_at).toLocaleString() : "–"}</td>
                <td class="wrap-any">{d.last_error ?? ""}</td>
              </tr>
            ))}
          </Table>
        </div>
      )}
      {confirm.dialog}
    </section>
  );
}

// Email: the control plane's SMTP settings and a test mail
// (administrators), and the caller's own e-mail preferences.
function Email({ admin }: { admin: boolean }) {
  return (
    <>
      <h2>E-mail</h2>
      <div class="grid2">
        {admin && <Smtp />}
        <Preferences />
      </div>
    </>
  );
}

function Smtp() {
  const res = useResource(() => ok(api.GET("/api/v1/notifications/email")));
  const s = res.data;
  const [to, setTo] = useState(currentUser()?.email ?? "");
  const { problem, busy, errs, handleSubmit } = useAction();
  const [result, setResult] = useState<Schemas["MailTestResult"] | null>(null);

  const send = handleSubmit(async () => {
    setResult(null);
    setResult(await ok(api.POST("/api/v1/notifications/email/test", { body: { to: to.trim() } })));
  });

  return (
    <div class="card">
      <h3>SMTP server</h3>
      <ProblemBox problem={res.problem} />
      {!s && !res.problem && <Loading what="the SMTP settings" />}
      {s && !s.enabled && (
        <p>
          No SMTP server is set, so no e-mail goes out. Start the control plane with <code>--smtp-host</code>, <code>--smtp-from</code> and
          the other <code>--smtp-*</code> settings (or <code>CAPSTAN_SMTP_*</code>); the password comes from <code>CAPSTAN_SMTP_PASSWORD</code>{" "}
          or <code>--smtp-password-file</code>.
        </p>
      )}
      {s && s.enabled && (
        <dl class="facts">
          <dt>Server</dt>
          <dd>
            {s.host}:{s.port}
          </dd>
          <dt>Security</dt>
          <dd>{s.security}</dd>
          <dt>User</dt>
          <dd>{s.user || "no authentication"}</dd>
          <dt>Password</dt>
          <dd>{s.password_set ? "set (never shown)" : "none"}</dd>
          <dt>From</dt>
          <dd>{s.from}</dd>
        </dl>
      )}
      <p class="muted">These settings come from how the control plane was started; change them there.</p>
      <form class="form" onSubmit={send} aria-label="Send a test e-mail">
        <ProblemBox problem={problem} fields={["to"]} />
        <Field label="Send a test e-mail to" name="mail-to" errors={errs.to}>
          <input id="mail-to" type="email" required value={to} onInput={(e) => setTo((e.target as HTMLInputElement).value)} />
        </Field>
        <div class="row">
          <button type="submit" disabled={busy || !s?.enabled}>
            {busy ? "Sending…" : "Send test e-mail"}
          </button>
        </div>
      </form>
      {result && (
        <div class={"result " + (result.delivered ? "ok" : "bad")} role="status">
          <strong>{result.delivered ? `Sent to ${result.to}` : `Not sent to ${result.to}`}</strong> · {result.duration_ms} ms
          {result.error && <p>{result.error}</p>}
        </div>
      )}
    </div>
  );
}

const prefs: { key: "email_deploy_failure" | "email_deploy_success" | "email_alerts"; label: string }[] = [
  { key: "email_deploy_failure", label: "Deployments that fail" },
  { key: "email_deploy_success", label: "Deployments that succeed" },
  { key: "email_alerts", label: "Alerts opening and resolving" },
];

function Preferences() {
  const res = useResource(() => ok(api.GET("/api/v1/notifications/settings")));
  const [problem, setProblem] = useState<Problem | null>(null);
  const [saved, setSaved] = useState(false);
  const s = res.data;

  async function change(key: (typeof prefs)[number]["key"], value: boolean) {
    if (!s) return;
    setProblem(null);
    setSaved(false);
    try {
      const next = await ok(
        api.PUT("/api/v1/notifications/settings", {
          body: { email_deploy_failure: s.email_deploy_failure, email_deploy_success: s.email_deploy_success, email_alerts: s.email_alerts, [key]: value },
        }),
      );
      res.set(() => next);
      setSaved(true);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  return (
    <div class="card">
      <h3>Mail me about</h3>
      <ProblemBox problem={problem ?? res.problem} />
      {!s && !res.problem && <Loading what="your preferences" />}
      {s && (
        <fieldset>
          <legend>Your e-mail preferences</legend>
          {prefs.map((p) => (
            <label key={p.key} class="check">
              <input type="checkbox" checked={s[p.key]} onChange={(e) => void change(p.key, (e.target as HTMLInputElement).checked)} />
              {p.label}
            </label>
          ))}
        </fieldset>
      )}
      <p class="muted" aria-live="polite">
        {saved ? "Saved." : "Mails go to your account's address when the control plane has an SMTP server."}
      </p>
    </div>
  );
}


import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../../api/client";
import { Field, Link, Loading, ProblemBox, StatusBadge, Table, useConfirm } from "../../components/ui";
import { currentUser } from "../../lib/auth";
import { liveSteps, settingsBody, stepRows, type S3Form, type StorageStep } from "../../lib/backups";
import { duration } from "../../lib/format";
import { finished } from "../../lib/jobs";
import { useLive } from "../../lib/live";
import { useAction } from "../../lib/action";
import { asProblem, fieldErrors, type Problem } from "../../lib/problem";
import { useResource } from "../../lib/resource";
import { useTitle } from "../../lib/title";
import { BackupsNav, useBackupJob } from "./shared";

// Storage shows where backups go; administrators change it (secrets are
// write-only), connect or disconnect the cloud drive, and test the
// storage from a server, step by step, live.
export function Storage() {
  useTitle("Storage", "Backups");
  const admin = currentUser()?.admin ?? false;
  const settings = useResource(() => ok(api.GET("/api/v1/backups/settings")));
  const drive = useResource(async () => (admin ? ok(api.GET("/api/v1/backups/clouddrive")) : null));
  useLive([], (_d, type) => {
    if (type === "reset") {
      void settings.reload();
      void drive.reload();
    }
  });
  const s = settings.data;
  return (
    <section>
      <h1>Backups</h1>
      <BackupsNav at="storage" />
      <ProblemBox problem={settings.problem} />
      {!s && !settings.problem && <Loading what="the storage settings" />}
      {s && !admin && <SettingsView s={s} />}
      {s && admin && <SettingsForm s={s} driveConnected={!!drive.data?.connected} onSaved={(v) => settings.set(() => v)} />}
      {admin && drive.data && <CloudDrive status={drive.data} onChange={() => void drive.reload()} />}
      {admin && s?.configured && <StorageTest />}
    </section>
  );
}

type SettingsView = Schemas["SettingsView"];

function SettingsView({ s }: { s: SettingsView }) {
  return (
    <div class="card">
      <h2>Where backups go</h2>
      {!s.configured ? (
        <p class="muted">No storage is set: backups fail until an administrator sets one.</p>
      ) : s.provider === "clouddrive" ? (
        <p>
          The cloud drive, folder <strong>{s.folder}</strong>.
        </p>
      ) : (
        <dl class="facts">
          <dt>Endpoint</dt>
          <dd>
            {s.tls ? "https" : "http"}://{s.endpoint}
          </dd>
          <dt>Bucket</dt>
          <dd>{s.bucket}</dd>
          <dt>Prefix</dt>
          <dd>{s.prefix || "–"}</dd>
          <dt>Region</dt>
          <dd>{s.region}</dd>
        </dl>
      )}
    </div>
  );
}

function SettingsForm({ s, driveConnected, onSaved }: { s: SettingsView; driveConnected: boolean; onSaved: (v: SettingsView) => void }) {
  const [provider, setProvider] = useState<"s3" | "clouddrive">(s.provider ?? "s3");
  const [form, setForm] = useState<S3Form>({
    endpoint: s.endpoint,
    region: s.region,
    bucket: s.bucket,
    prefix: s.prefix,
    access_key_id: "",
    secret_access_key: "",
    path_style: s.path_style,
    tls: s.configured ? s.tls : true,
    ca: s.ca,
  });
  const [folder, setFolder] = useState(s.folder || "Capstan backups");
  const { problem, busy, errs, handleSubmit } = useAction();
  const [saved, setSaved] = useState(false);
  const set = (p: Partial<S3Form>) => setForm((f) => ({ ...f, ...p }));
  const fields = ["provider", "endpoint", "region", "bucket", "prefix", "access_key_id", "secret_access_key", "path_style", "tls", "ca", "folder"];

  const submit = handleSubmit(async () => {
    setSaved(false);
    const v = await ok(api.PUT("/api/v1/backups/settings", { body: settingsBody(provider, form, folder) as Schemas["BackupSettingsInputBody"] }));
    // The key pair is write-only: once stored, the fields empty.
    setForm((f) => ({ ...f, access_key_id: "", secret_access_key: "" }));
    setSaved(true);
    onSaved(v);
  });
  const inv = (n: string) => (errs[n] ? true : undefined);
  const desc = (n: string) => (errs[n] ? n + "-error" : n + "-hint");
  const secret = (isSet: boolean) => (isSet ? "Stored (never shown): leave empty to keep it." : "Not set.");
  return (
    <form class="card form wide" onSubmit={submit} aria-label="Storage settings" noValidate>
      <h2>Where backups go</h2>
      {!s.configured && <p class="muted">No storage is set yet: backups fail until one is.</p>}
      <ProblemBox problem={problem} fields={fields} />
      <fieldset class="modes">
        <legend>Provider</legend>
        <label class="check">
          <input type="radio" name="provider" checked={provider === "s3"} onChange={() => setProvider("s3")} /> S3-compatible bucket
        </label>
        <label class="check">
          <input type="radio" name="provider" checked={provider === "clouddrive"} onChange={() => setProvider("clouddrive")} /> Cloud drive
          folder
        </label>
      </fieldset>
      {errs.provider && (
        <small class="field-error" role="alert">
          {errs.provider.join("; ")}
        </small>
      )}
      {provider === "clouddrive" ? (
        <Field label="Folder" name="folder" errors={errs.folder}
          hint={driveConnected ? "In the drive's root; made when missing." : "Connect the drive below first: backups need it."}>
          <input id="folder" value={folder} aria-invalid={inv("folder")} aria-describedby={desc("folder")} onInput={(e) => setFolder(e.currentTarget.value)} />
        </Field>
      ) : (
        <>
          <div class="grid2 tight">
            <Field label="Endpoint" name="endpoint" errors={errs.endpoint} hint="host[:port], without https://">
              <input id="endpoint" value={form.endpoint} aria-invalid={inv("endpoint")} aria-describedby={desc("endpoint")}
                placeholder="s3.eu-central-1.amazonaws.com" onInput={(e) => set({ endpoint: e.currentTarget.value })} />
            </Field>
            <Field label="Region" name="region" errors={errs.region} hint="Empty: us-east-1">
              <input id="region" value={form.region} aria-invalid={inv("region")} aria-describedby={desc("region")}
                onInput={(e) => set({ region: e.currentTarget.value })} />
            </Field>
            <Field label="Bucket" name="bucket" errors={errs.bucket}>
              <input id="bucket" value={form.bucket} aria-invalid={inv("bucket")} onInput={(e) => set({ bucket: e.currentTarget.value })} />
            </Field>
            <Field label="Prefix" name="prefix" errors={errs.prefix} hint="A folder for every key; optional">
              <input id="prefix" value={form.prefix} aria-invalid={inv("prefix")} aria-describedby={desc("prefix")}
                onInput={(e) => set({ prefix: e.currentTarget.value })} />
            </Field>
            <Field label="Access key id" name="access_key_id" errors={errs.access_key_id} hint={secret(s.access_key_id_set)}>
              <input id="access_key_id" type="password" autoComplete="off" value={form.access_key_id} aria-invalid={inv("access_key_id")}
                aria-describedby={desc("access_key_id")} onInput={(e) => set({ access_key_id: e.currentTarget.value })} />
            </Field>
            <Field label="Secret access key" name="secret_access_key" errors={errs.secret_access_key} hint={secret(s.secret_access_key_set)}>
              <input id="secret_access_key" type="password" autoComplete="off" value={form.secret_access_key}
                aria-invalid={inv("secret_access_key")} aria-describedby={desc("secret_access_key")}
                onInput={(e) => set({ secret_access_key: e.currentTarget.value })} />
            </Field>
          </div>
          <div class="row wrap">
            <label class="check">
              <input type="checkbox" checked={form.tls} onChange={(e) => set({ tls: e.currentTarget.checked })} /> HTTPS
            </label>
            <label class="check">
              <input type="checkbox" checked={form.path_style} onChange={(e) => set({ path_style: e.currentTarget.checked })} /> Bucket in
              the path (most self-hosted services)
            </label>
          </div>
          <Field label="CA certificate (PEM)" name="ca" errors={errs.ca} hint="Optional: for a service whose certificate a private CA signed.">
            <textarea id="ca" rows={3} value={form.ca} aria-invalid={inv("ca")} aria-describedby={desc("ca")}
              onInput={(e) => set({ ca: e.currentTarget.value })} />
          </Field>
        </>
      )}
      <div class="row">
        <button type="submit" class="primary" disabled={busy}>
          Save the storage settings
        </button>
        {saved && (
          <span role="status" class="s-succeeded">
            Saved.
          </span>
        )}
      </div>
    </form>
  );
}

function CloudDrive({ status, onChange }: { status: Schemas["DriveStatus"]; onChange: () => void }) {
  const [problem, setProblem] = useState<Problem | null>(null);
  const confirm = useConfirm((force: boolean) => ({ title: "Disconnect the cloud drive", action: force ? "Forget" : "Disconnect", object: who,
    run: () => disconnect(force) }));
  const [note, setNote] = useState("");

  async function connect() {
    setProblem(null);
    try {
      const r = await ok(api.POST("/api/v1/backups/clouddrive/connect"));
      // The consent page returns to the control plane in this browser.
      location.assign(r.consent_url);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  async function disconnect(force: boolean) {
    setProblem(null);
    try {
      const r = await ok(api.DELETE("/api/v1/backups/clouddrive/connection", { params: { query: { force } } }));
      setNote(r.revoke_error ? `Forgotten, but not revoked: ${r.revoke_error}. Remove the access in the account's settings.` : r.message);
      onChange();
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  const who = status.account_email || "the connected account";
  return (
    <div class="card" aria-labelledby="drive-title">
      <h2 id="drive-title">Cloud drive</h2>
      <ProblemBox problem={problem} />
      {note && <p role="status">{note}</p>}
      {!status.configured ? (
        <p class="muted">No cloud drive client is configured on this control plane (capstan serve --clouddrive-client-id).</p>
      ) : status.connected ? (
        <>
          <p>
            <span class="badge s-succeeded">connected</span> <strong>{who}</strong>{" "}
            <span class="muted">since {status.connected_at ? new Date(status.connected_at).toLocaleString() : "–"}</span>
          </p>
          <div class="row wrap">
            <button type="button" class="danger" onClick={() => confirm.ask(false)}>
              Disconnect
            </button>
            {problem?.status === 502 && (
              <button type="button" class="danger" onClick={() => confirm.ask(true)}>
                Forget it without revoking
              </button>
            )}
          </div>
        </>
      ) : (
        <>
          <p>
            <span class="badge s-cancelled">not connected</span> Register <code>{status.redirect_uri}</code> with the OAuth client, then
            connect.
          </p>
          <button type="button" onClick={() => void connect()}>
            Connect a drive
          </button>
        </>
      )}
      {confirm.dialog}
    </div>
  );
}

function StorageTest() {
  const servers = useResource(async () => (await ok(api.GET("/api/v1/servers"))).servers ?? []);
  const [server, setServer] = useState("");
  const [problem, setProblem] = useState<Problem | null>(null);
  const follow = useBackupJob();
  const errs = fieldErrors(problem);
  const data = follow.detail?.data as { steps?: StorageStep[]; bytes?: number } | undefined;
  const online = (servers.data ?? []).filter((s) => s.status !== "revoked");

  async function run(e: Event) {
    e.preventDefault();
    setProblem(null);
    try {
      const r = await ok(api.POST("/api/v1/backups/settings/test", { params: { query: { server_id: server } } }));
      follow.start(r.job);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  const running = follow.job && !finished(follow.job.status);
  return (
    <form class="card" onSubmit={run} aria-label="Test the storage" noValidate>
      <h2>Test the storage</h2>
      <p class="muted">A server writes a 256 KiB probe object, reads it back, lists it and deletes it.</p>
      <ProblemBox problem={problem} fields={["server_id"]} />
      <div class="row wrap end-items">
        <Field label="From server" name="server_id" errors={errs.server_id}>
          <select id="server_id" value={server} aria-invalid={errs.server_id ? true : undefined} onChange={(e) => setServer(e.currentTarget.value)}>
            <option value="">Choose…</option>
            {online.map((s) => (
              <option key={s.id} value={s.id}>
                {s.name} ({s.status})
              </option>
            ))}
          </select>
        </Field>
        <button type="submit" class="primary" disabled={!server || !!running}>
          Test the storage
        </button>
      </div>
      {follow.job && (
        <div class="scroll-x" aria-live="polite">
          <p>
            <StatusBadge status={follow.job.status} /> <Link href={"/jobs/" + follow.job.id}>job</Link>
          </p>
          <Table label="Storage test steps" columns={["Step", "Result", "Time"]}>
            {stepRows(data?.steps ?? liveSteps(follow.events)).map(({ step, result }) => (
              <tr key={step} data-step={step}>
                <td>{step}</td>
                <td class={result ? (result.ok ? "s-succeeded" : "lvl-error") : "muted"}>
                  {result ? (result.ok ? "ok" : "failed: " + (result.error ?? "")) : running ? "…" : "not run"}
                </td>
                <td>{result ? duration(result.duration_ms) : "–"}</td>
              </tr>
            ))}
          </Table>
          {follow.job.error && <p class="lvl-error">{follow.job.error}</p>}
        </div>
      )}
    </form>
  );
}

import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../../api/client";
import { Field, Loading, ProblemBox, useConfirm } from "../../components/ui";
import { patchBody, settingsForm, type SettingsForm } from "../../lib/apps";
import { asProblem, fieldErrors, type Problem } from "../../lib/problem";
import { useResource } from "../../lib/resource";
import { navigate } from "../../lib/router";

type Detail = Schemas["ApplicationDetail"];

// Settings edits the application as written. The other sections read it
// with the compose document masked and a service's commands hidden, so
// when it has either, the form reads the application once more, revealed
// (a read the audit log records).
export function Settings({ app, onSaved }: { app: Detail; onSaved: (d: Detail) => void }) {
  const hidden = !!app.compose_masked || !!app.service?.commands_hidden;
  const full = useResource(
    () => (hidden ? ok(api.GET("/api/v1/applications/{id}", { params: { path: { id: app.id }, query: { reveal: true } } })) : Promise.resolve(app)),
    [app.id],
  );
  if (!full.data) return full.problem ? <ProblemBox problem={full.problem} /> : <Loading what="the settings" />;
  return (
    <SettingsEditor
      app={full.data}
      onSaved={(d, f) => {
        // The reply is masked as well: what was saved is what the form holds.
        full.set(() => ({
          ...d,
          compose: d.compose_masked ? f.compose : d.compose,
          compose_masked: false,
          service: d.service && { ...d.service, start_command: f.start_command.trim(), build_command: f.build_command.trim(), commands_hidden: false },
        }));
        onSaved(d);
      }}
    />
  );
}

// SettingsEditor changes the application for its next deployment, and
// deletes it.
function SettingsEditor({ app, onSaved }: { app: Detail; onSaved: (d: Detail, f: SettingsForm) => void }) {
  const [f, setF] = useState<SettingsForm>(() => settingsForm(app));
  const [problem, setProblem] = useState<Problem | null>(null);
  const [saved, setSaved] = useState(false);
  const [purge, setPurge] = useState(false);
  const confirm = useConfirm(() => ({ title: "Delete the application", action: "Delete", object: app.name + (purge ? " and its volumes" : ""), run: remove }));
  const errs = fieldErrors(problem);
  const body = patchBody(app, f);
  const input = (name: keyof SettingsForm) => ({
    id: "set-" + name,
    value: String(f[name]),
    "aria-invalid": errs[name] ? true : undefined,
    onInput: (e: Event) => {
      setSaved(false);
      setF((cur) => ({ ...cur, [name]: (e.target as HTMLInputElement).value }));
    },
  });
  const field = (label: string, name: keyof SettingsForm, hint?: string, mono = false) => (
    <Field label={label} name={"set-" + name} errors={errs[name === "branch" ? "source" : name]} hint={hint}>
      <input {...input(name)} class={mono ? "mono" : undefined} />
    </Field>
  );
  async function save(e: Event) {
    e.preventDefault();
    if (!body) return;
    setProblem(null);
    try {
      const d = await ok(api.PATCH("/api/v1/applications/{id}", { params: { path: { id: app.id } }, body: body as Schemas["PatchAppInputBody"] }));
      setSaved(true);
      onSaved(d, f);
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  async function remove() {
    setProblem(null);
    try {
      await ok(api.DELETE("/api/v1/applications/{id}", { params: { path: { id: app.id }, query: { purge } } }));
      navigate("/applications");
    } catch (err) {
      setProblem(asProblem(err));
    }
  }
  return (
    <>
      <form class="card form" aria-label="Settings" onSubmit={save} noValidate>
        <h2>Settings</h2>
        <p class="muted">Changes apply to the next deployment; the running release is untouched.</p>
        <ProblemBox problem={problem} fields={Object.keys(f).concat(["source", "image"])} />
        {app.kind !== "service" && field("Name", "name", "Lowercase letters, digits and dashes.")}
        {app.source.type === "image" && field("Image", "image", "A Docker reference.", true)}
        {app.source.type === "git" && field("Branch", "branch", "Deployed by default and on pushes.", true)}
        {app.kind === "compose" && app.source.type === "inline" && (
          <Field label="Compose document" name="set-compose" errors={errs.compose}>
            <textarea {...input("compose")} rows={10} class="mono" spellcheck={false} />
          </Field>
        )}
        {app.kind === "compose" && app.source.type === "git" && field("Compose file", "compose_file", "Empty for the default.", true)}
        {app.kind === "compose" && field("Web service", "web_service")}
        {app.kind === "container" && app.source.type === "git" && field("Dockerfile", "dockerfile", undefined, true)}
        {app.kind === "container" && app.source.type === "git" && field("Build context", "build_context", undefined, true)}
        {app.kind === "service" && field("Start command", "start_command", "The program listens on 127.0.0.1:$PORT.", true)}
        {app.kind === "service" && field("Build command", "build_command", undefined, true)}
        {app.kind === "service" && field("Build time limit (seconds)", "build_timeout_seconds", "1 to 7200.")}
        {app.kind !== "service" && field("Container port", "container_port")}
        {field("Health path", "health_path", undefined, true)}
        {field("Memory limit", "memory_limit", "e.g. 512m; empty for none.")}
        {field("Published port", "publish", "e.g. 8081 (on 127.0.0.1) or 0.0.0.0:8081; empty for none. Applied to the running release at once.", true)}
        {app.source.type === "git" && (
          <label class="check">
            <input type="checkbox" checked={f.auto_deploy} onChange={(e) => setF((cur) => ({ ...cur, auto_deploy: (e.target as HTMLInputElement).checked }))} />{" "}
            Deploy every push to the branch
          </label>
        )}
        <div class="row wrap">
          <button type="submit" class="primary" disabled={!body}>
            Save the settings
          </button>
          {saved && (
            <span role="status" class="ok-text">
              Saved: the next deployment uses them.
            </span>
          )}
        </div>
      </form>
      <div class="card danger-zone">
        <h2>Delete</h2>
        <p class="muted">Removes the application's containers, its domains and its deployments from the server.</p>
        {app.kind === "compose" && (
          <label class="check">
            <input type="checkbox" checked={purge} onChange={(e) => setPurge((e.target as HTMLInputElement).checked)} /> Also remove its named volumes
            and their data
          </label>
        )}
        <button type="button" class="danger" onClick={() => confirm.ask(null)}>
          Delete {app.name}
        </button>
      </div>
      {confirm.dialog}
    </>
  );
}

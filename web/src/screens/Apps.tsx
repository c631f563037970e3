import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { BackLink, Field, Link, Loading, ProblemBox, StatusBadge, Table } from "../components/ui";
import { lazy } from "../components/lazy";
import { currentUser } from "../lib/auth";
import { Ago } from "../components/Ago";
import { createBody, emptyForm, sourcesOf, withKind, type AppForm, type Kind, type KV, type SourceType } from "../lib/apps";
import { useLive } from "../lib/live";
import { useAction } from "../lib/action";
import { useResource } from "../lib/resource";
import { navigate } from "../lib/router";
import "./apps.css";
import { useTitle } from "../lib/title";

type App = Schemas["Application"];

// The git host connection has its own code, loaded where it is shown.
const GitHostCard = lazy(() => import("./GitHost").then((m) => m.GitHostCard), "the git host");
const GitHostState = lazy(() => import("./GitHost").then((m) => m.GitHostState), "the git host");

const kindLabel: Record<Kind, string> = { container: "Container", compose: "Compose stack", service: "Service" };
const sourceLabel: Record<SourceType, string> = { image: "Image", git: "Git repository", inline: "Compose document" };

export function sourceText(a: Pick<App, "source" | "kind" | "compose_file">): string {
  const s = a.source;
  if (s.type === "image") return s.image ?? "";
  if (s.type === "inline") return "compose document";
  return `git: repository ${s.repo_id}, branch ${s.branch}`;
}

// Apps lists the applications with their status, kept current from the
// stream (deployments and removals).
export function Apps() {
  useTitle("Applications");
  const res = useResource(async () => {
    const [list, servers] = await Promise.all([
      ok(api.GET("/api/v1/applications")),
      ok(api.GET("/api/v1/servers")).catch(() => null),
    ]);
    const names = new Map((servers?.servers ?? []).map((s) => [s.id, s.name]));
    return { apps: list.applications ?? [], names };
  });
  useLive(["event", "job"], (data, type) => {
    if (type === "reset") return void res.reload();
    if (type === "event" && /^deploy\./.test(data?.type ?? "")) return void res.reload();
    if (type === "job" && /^app\.(deploy|remove)$/.test(data?.type ?? "") && data.status !== "running") void res.reload();
  });
  const admin = currentUser()?.admin ?? false;
  const data = res.data;
  return (
    <section>
      <div class="row wrap between">
        <h1>Applications</h1>
        {admin && (
          <Link href="/applications/new" class="button primary">
            New application
          </Link>
        )}
      </div>
      <ProblemBox problem={res.problem} />
      {!data && !res.problem && <Loading what="applications" />}
      {data && (
        <div class="card scroll-x">
          <Table
            label="Applications"
            columns={["Name", "Status", "Kind", "Server", "Source", "Updated"]}
            empty={data.apps.length === 0 && `No applications yet.${admin ? " Create one from an image, a git repository, a compose document or as a service." : ""}`}
          >
            {data.apps.map((a) => (
              <tr key={a.id} data-app={a.name}>
                <td>
                  <Link href={"/applications/" + a.id}>{a.name}</Link>
                </td>
                <td>
                  <StatusBadge status={a.status} />
                </td>
                <td>{kindLabel[a.kind]}</td>
                <td>
                  <Link href={"/servers/" + a.server_id}>{data.names.get(a.server_id) ?? a.server_id}</Link>
                </td>
                <td class="apps-source">{sourceText(a)}</td>
                <td><Ago at={a.updated_at} /></td>
              </tr>
            ))}
          </Table>
        </div>
      )}
      {admin && <GitHostCard />}
    </section>
  );
}

// KVRows edits a list of key/value pairs whose values are secrets: the
// values are password inputs and are never shown again after saving.
export function KVRows(props: { label: string; rows: KV[]; onChange: (rows: KV[]) => void; errors?: string[]; id: string }) {
  const set = (i: number, part: Partial<KV>) => props.onChange(props.rows.map((r, j) => (j === i ? { ...r, ...part } : r)));
  return (
    <fieldset class="kv" id={props.id}>
      <legend>{props.label}</legend>
      {props.rows.map((r, i) => (
        <div class="row wrap" key={i}>
          <input aria-label={`${props.label}: name ${i + 1}`} placeholder="NAME" value={r.key} class="mono"
            onInput={(e) => set(i, { key: (e.target as HTMLInputElement).value })} />
          <input aria-label={`${props.label}: value of ${r.key || "row " + (i + 1)}`} type="password" autocomplete="new-password"
            placeholder="value" value={r.value} onInput={(e) => set(i, { value: (e.target as HTMLInputElement).value })} />
          <button type="button" aria-label={`Remove ${r.key || "row " + (i + 1)}`} onClick={() => props.onChange(props.rows.filter((_, j) => j !== i))}>
            Remove
          </button>
        </div>
      ))}
      {props.errors?.length ? (
        <small class="field-error" role="alert">
          {props.errors.join("; ")}
        </small>
      ) : null}
      <button type="button" onClick={() => props.onChange([...props.rows, { key: "", value: "" }])}>
        Add {props.label.toLowerCase().replace(/s$/, "")}
      </button>
    </fieldset>
  );
}

// AppNew creates an application of any kind from any source its kind
// takes; git sources pick an installation's repository and branch.
export function AppNew({ serverId }: { serverId?: string }) {
  useTitle("New application", "Applications");
  const [f, setF] = useState<AppForm>(() => emptyForm(serverId ?? ""));
  const { problem, busy, errs, handleSubmit } = useAction();
  const servers = useResource(async () => (await ok(api.GET("/api/v1/servers"))).servers ?? []);
  const set = (part: Partial<AppForm>) => setF((cur) => ({ ...cur, ...part }));
  const input = (name: keyof AppForm) => ({
    id: "app-" + name,
    name,
    value: String(f[name] ?? ""),
    "aria-invalid": errs[name] ? true : undefined,
    onInput: (e: Event) => set({ [name]: (e.target as HTMLInputElement).value } as Partial<AppForm>),
  });

  const submit = handleSubmit(async () => {
    const a = await ok(api.POST("/api/v1/applications", { body: createBody(f) as Schemas["CreateAppInputBody"] }));
    navigate("/applications/" + a.id);
  });

  // After a refusal, the first field at fault (or the problem) comes into view.
  useEffect(() => {
    if (!problem) return;
    const el = document.querySelector<HTMLElement>('form [aria-invalid="true"]') ?? document.querySelector<HTMLElement>("form .problem");
    el?.scrollIntoView({ block: "center" });
    if (el?.matches("input, select, textarea")) el.focus();
  }, [problem]);

  const enrolled = (servers.data ?? []).filter((s) => s.status !== "pending" && s.status !== "revoked");
  const fields = ["name", "server_id", "kind", "source", "image", "container_port", "health_path", "memory_limit", "publish", "env", "compose",
    "compose_file", "web_service", "dockerfile", "build_context", "build_args", "build_secrets", "start_command", "build_command", "build_timeout_seconds",
    "auto_deploy"];
  return (
    <section class="apps">
      <BackLink href="/applications" label="Applications" />
      <h1>New application</h1>
      <form class="card form" aria-label="New application" onSubmit={submit} noValidate>
        <ProblemBox problem={problem} fields={fields} />
        <F label="Name" name="name" errors={errs.name} hint="Lowercase letters, digits and dashes, unique on its server, e.g. web.">
          <input {...input("name")} required autoFocus />
        </F>
        <F label="Server" name="server_id" errors={errs.server_id}>
          <select {...input("server_id")} onChange={(e) => set({ server_id: (e.target as HTMLSelectElement).value })}>
            <option value="">Choose a server…</option>
            {enrolled.map((s) => (
              <option key={s.id} value={s.id}>
                {s.name} ({s.status})
              </option>
            ))}
          </select>
        </F>
        <fieldset class="choice">
          <legend>Kind</legend>
          {(["container", "compose", "service"] as Kind[]).map((k) => (
            <label key={k}>
              <input type="radio" name="kind" value={k} checked={f.kind === k} onChange={() => setF((cur) => withKind(cur, k))} />{" "}
              {kindLabel[k]}
            </label>
          ))}
          {errs.kind && <small class="field-error">{errs.kind.join("; ")}</small>}
        </fieldset>
        {sourcesOf(f.kind).length > 1 && (
          <fieldset class="choice">
            <legend>Source</legend>
            {sourcesOf(f.kind).map((s) => (
              <label key={s}>
                <input type="radio" name="source" value={s} checked={f.source === s} onChange={() => set({ source: s })} /> {sourceLabel[s]}
              </label>
            ))}
          </fieldset>
        )}
        {f.source === "image" && (
          <F label="Image" name="image" errors={errs.source ?? errs.image} hint="A Docker reference, e.g. ghcr.io/acme/web:1.4.">
            <input {...input("image")} class="mono" />
          </F>
        )}
        {f.source === "git" && <GitSource f={f} set={set} errors={errs.source} />}
        {f.kind === "compose" && f.source === "inline" && (
          <F label="Compose document" name="compose" errors={errs.compose}
            hint="services with image, environment, env_file (the application's env), command, depends_on, healthcheck, named volumes, restart, mem_limit.">
            <textarea {...input("compose")} rows={10} class="mono" spellcheck={false} />
          </F>
        )}
        {f.kind === "compose" && f.source === "git" && (
          <F label="Compose file" name="compose_file" errors={errs.compose_file} hint="Its path in the repository; empty for compose.yaml, else docker-compose.yml.">
            <input {...input("compose_file")} class="mono" />
          </F>
        )}
        {f.kind === "compose" && (
          <F label="Web service" name="web_service" errors={errs.web_service} hint="The service the proxy sends requests to.">
            <input {...input("web_service")} />
          </F>
        )}
        {f.kind === "container" && f.source === "git" && (
          <>
            <F label="Dockerfile" name="dockerfile" errors={errs.dockerfile} hint="Its path in the build context; default Dockerfile.">
              <input {...input("dockerfile")} class="mono" />
            </F>
            <F label="Build context" name="build_context" errors={errs.build_context} hint="A directory of the repository; default the top.">
              <input {...input("build_context")} class="mono" />
            </F>
            <KVRows id="app-build_args" label="Build arguments" rows={f.build_args} errors={errs.build_args} onChange={(rows) => set({ build_args: rows })} />
            <p class="muted">Build arguments are not secret: Docker keeps them in clear in the image's history on the server. Never pass a token or a password here: use a build secret.</p>
            <KVRows id="app-build_secrets" label="Build secrets" rows={f.build_secrets} errors={errs.build_secrets} onChange={(rows) => set({ build_secrets: rows })} />
            <p class="muted">
              A step reads a build secret with <code>RUN --mount=type=secret,id=NAME</code> (the file /run/secrets/NAME); the image keeps
              no trace of it, and nobody can read it back.
            </p>
          </>
        )}
        {f.kind === "service" && (
          <>
            <F label="Start command" name="start_command" errors={errs.start_command}
              hint="Runs in the release directory; the program listens on 127.0.0.1:$PORT.">
              <input {...input("start_command")} class="mono" />
            </F>
            <F label="Build command" name="build_command" errors={errs.build_command} hint="Optional; runs in the checkout as an unprivileged account.">
              <input {...input("build_command")} class="mono" />
            </F>
            <F label="Build time limit (seconds)" name="build_timeout_seconds" errors={errs.build_timeout_seconds} hint="1 to 7200; default 900.">
              <input {...input("build_timeout_seconds")} inputMode="numeric" />
            </F>
          </>
        )}
        {f.kind !== "service" && (
          <F label="Container port" name="container_port" errors={errs.container_port} hint="The port the application listens on in its container.">
            <input {...input("container_port")} inputMode="numeric" />
          </F>
        )}
        <F label="Health path" name="health_path" errors={errs.health_path} hint="Must answer 2xx or 3xx before a release takes traffic; default /.">
          <input {...input("health_path")} class="mono" />
        </F>
        <F label="Memory limit" name="memory_limit" errors={errs.memory_limit} hint="e.g. 512m or 1g; empty for none.">
          <input {...input("memory_limit")} />
        </F>
        <F
          label="Published port"
          name="publish"
          errors={errs.publish}
          hint="A port of the server on which it answers over HTTP, e.g. 8081 (on 127.0.0.1) or 0.0.0.0:8081; empty for none."
        >
          <input {...input("publish")} class="mono" />
        </F>
        <KVRows id="app-env" label="Environment variables" rows={f.env} errors={errs.env} onChange={(rows) => set({ env: rows })} />
        <p class="muted">Values are stored encrypted and are never shown again: the console lists their names only.</p>
        {f.source === "git" && (
          <label class="check">
            <input type="checkbox" checked={f.auto_deploy} onChange={(e) => set({ auto_deploy: (e.target as HTMLInputElement).checked })} /> Deploy
            every push to the branch
          </label>
        )}
        <label class="check">
          <input type="checkbox" checked={f.deploy} onChange={(e) => set({ deploy: (e.target as HTMLInputElement).checked })} /> Deploy it now
        </label>
        <div class="row">
          <button type="submit" class="primary" disabled={busy}>
            Create the application
          </button>
          <Link href="/applications" class="button">
            Cancel
          </Link>
        </div>
      </form>
    </section>
  );
}

function F(props: { label: string; name: string; errors?: string[]; hint?: string; children: ComponentChildren }) {
  return (
    <Field label={props.label} name={"app-" + props.name} errors={props.errors} hint={props.hint}>
      {props.children}
    </Field>
  );
}

// GitSource picks a repository of the git host's installations and one of
// its branches, and says how to connect the git host when it is not.
function GitSource({ f, set, errors }: { f: AppForm; set: (p: Partial<AppForm>) => void; errors?: string[] }) {
  const status = useResource(() => ok(api.GET("/api/v1/githost/status")));
  const repos = useResource(
    async () => (status.data?.connected ? (await ok(api.GET("/api/v1/githost/repositories"))).repositories ?? [] : []),
    [status.data?.connected],
  );
  const key = f.installation_id && f.repo_id ? `${f.installation_id}/${f.repo_id}` : "";
  const branches = useResource(async () => {
    if (!key) return [];
    const [inst, repo] = key.split("/").map(Number);
    return (await ok(api.GET("/api/v1/githost/repositories/{installation_id}/{repo_id}/branches",
      { params: { path: { installation_id: inst, repo_id: repo } } }))).branches ?? [];
  }, [key]);
  return (
    <div class="githost">
      <GitHostState res={status} />
      {status.data?.connected && (
        <>
          <ProblemBox problem={repos.problem} />
          <div class="field">
            <label for="app-repo">Repository</label>
            <select id="app-repo" value={key} aria-invalid={errors ? true : undefined} onChange={(e) => {
              const v = (e.target as HTMLSelectElement).value;
              const r = (repos.data ?? []).find((x) => `${x.installation_id}/${x.repo_id}` === v);
              set({ installation_id: v.split("/")[0] ?? "", repo_id: v.split("/")[1] ?? "", branch: r?.default_branch ?? "" });
            }}>
              <option value="">{repos.loading ? "Loading repositories…" : "Choose a repository…"}</option>
              {(repos.data ?? []).map((r) => (
                <option key={r.repo_id} value={`${r.installation_id}/${r.repo_id}`}>
                  {r.full_name}
                  {r.private ? " (private)" : ""}
                </option>
              ))}
            </select>
          </div>
          <div class="field">
            <label for="app-branch">Branch</label>
            <select id="app-branch" value={f.branch} disabled={!key} onChange={(e) => set({ branch: (e.target as HTMLSelectElement).value })}>
              {!(branches.data ?? []).some((b) => b.name === f.branch) && <option value={f.branch}>{f.branch || "Choose a branch…"}</option>}
              {(branches.data ?? []).map((b) => (
                <option key={b.name} value={b.name}>
                  {b.name} ({b.commit_sha.slice(0, 7)})
                </option>
              ))}
            </select>
            <ProblemBox problem={branches.problem} />
          </div>
        </>
      )}
      {errors && (
        <small class="field-error" role="alert">
          {errors.join("; ")}
        </small>
      )}
    </div>
  );
}

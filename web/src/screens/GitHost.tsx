import { useEffect, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { Field, Link, Loading, ProblemBox, StatusBadge, Table, useConfirm } from "../components/ui";
import { currentUser } from "../lib/auth";
import { Ago } from "../components/Ago";
import { manifestForm, manifestReturn, once, setupReturn } from "../lib/githost";
import { asProblem, fieldErrors, type Problem } from "../lib/problem";
import { useResource, type Resource } from "../lib/resource";
import { navigate } from "../lib/router";
import "./githost.css";
import { useTitle } from "../lib/title";

type Status = Schemas["Status"];

// After a return from the git host, the Applications screen says what
// happened (?githost=connected|installed).
const notices: Record<string, string> = {
  connected: "The GitHub App is connected. Install it on the accounts whose repositories you deploy.",
  installed: "The installation is recorded: its repositories can be deployed.",
};

// GitHostCard is the git host's state on the Applications screen, for
// administrators.
export function GitHostCard() {
  const status = useResource(() => ok(api.GET("/api/v1/githost/status")));
  const notice = notices[new URLSearchParams(location.search).get("githost") ?? ""];
  return (
    <>
      {notice && status.data && (
        <p class="githost-notice" role="status">
          {notice}
        </p>
      )}
      <GitHostState res={status} />
    </>
  );
}

// GitHostState shows whether a git host app is connected, where it is
// installed, and connects one: the console asks for the app's manifest
// and posts it from the browser to the git host, which creates the app
// and sends the browser back to the console (GitHostReturn).
export function GitHostState({ res }: { res: Resource<Status> }) {
  const [problem, setProblem] = useState<Problem | null>(null);
  const [organization, setOrganization] = useState("");
  const [busy, setBusy] = useState("");
  const [installation, setInstallation] = useState("");
  const confirm = useConfirm((name: string) => ({
    title: "Disconnect the git host app",
    object: name,
    action: "Disconnect",
    run: () => run("Disconnecting…", async () => setGone(await ok(api.DELETE("/api/v1/githost/app")))),
    children: (
      <p>
        Capstan forgets its credentials and installations. Applications from git keep running; their next deploys fail until an app is
        connected again.
      </p>
    ),
  }));
  const [gone, setGone] = useState<Schemas["Disconnection"] | null>(null);
  const admin = currentUser()?.admin ?? false;
  const errs = fieldErrors(problem);
  const s = res.data;

  async function run(what: string, p: () => Promise<unknown>) {
    setProblem(null);
    setBusy(what);
    try {
      await p();
      await res.reload();
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setBusy("");
    }
  }

  async function connect() {
    setProblem(null);
    setBusy("Opening the git host…");
    try {
      const m = await ok(api.POST("/api/v1/githost/manifest", { body: organization ? { organization } : {} }));
      const form = manifestForm(document, m.post_url, m.manifest);
      document.body.appendChild(form);
      form.submit();
    } catch (err) {
      setProblem(asProblem(err));
      setBusy("");
    }
  }

  if (!s) return res.problem ? <ProblemBox problem={res.problem} /> : <Loading what="the git host" />;
  const installs = s.installations ?? [];
  return (
    <div class="card githost-state" data-githost={s.connected ? "connected" : "not-connected"}>
      <h2>Git host</h2>
      {gone && (
        <p role="status">
          {gone.message} <a href={gone.settings_url}>Delete the app on the git host</a>.
        </p>
      )}
      <ProblemBox problem={problem} fields={["organization", "installation_id"]} />
      {s.connected && s.app ? (
        <>
          <p>
            <StatusBadge status="connected" /> GitHub App <a href={s.app.html_url}>{s.app.name}</a> of {s.app.owner}, connected{" "}
            <Ago at={s.app.connected_at} />.
          </p>
          {installs.length > 0 ? (
            <div class="scroll-x">
              <Table label="Installations" columns={["Account", "Repositories", "Installation", "Recorded"]}>
                {installs.map((i) => (
                  <tr key={i.id} data-installation={i.id}>
                    <td>
                      {i.account} <span class="muted">({i.account_type})</span>
                    </td>
                    <td>{i.repository_selection === "selected" ? "selected ones" : i.repository_selection === "all" ? "all" : "?"}</td>
                    <td>{i.id}</td>
                    <td><Ago at={i.created_at} /></td>
                  </tr>
                ))}
              </Table>
            </div>
          ) : (
            <p>Not installed anywhere yet: install it on the accounts whose repositories you deploy.</p>
          )}
          {admin && (
            <div class="row wrap">
              <a class="button primary" href={s.app.install_url}>
                Install on an account
              </a>
              <button type="button" class="danger" disabled={!!busy} onClick={() => confirm.ask(s.app!.name)}>
                Disconnect…
              </button>
            </div>
          )}
          {admin && (
            <details class="githost-manual">
              <summary>Record an installation by its id</summary>
              <p class="muted">
                The git host brings you back here after installing the app. If it did not, record the installation with the id from
                the installation's address on the git host.
              </p>
              <div class="row wrap" role="group" aria-label="Record an installation">
                <Field label="Installation id" name="gh-installation" errors={errs.installation_id}>
                  <input id="gh-installation" inputMode="numeric" value={installation}
                    onInput={(e) => setInstallation((e.target as HTMLInputElement).value)} />
                </Field>
                <button type="button" disabled={!!busy}
                  onClick={() => run("Recording…", () => ok(api.POST("/api/v1/githost/installations",
                    { body: { installation_id: Number(installation), setup_action: "install" } })))}>
                  Record the installation
                </button>
              </div>
            </details>
          )}
        </>
      ) : (
        <>
          <p>
            <StatusBadge status="not connected" /> Applications from git need a GitHub App of your own.
            {admin ? " Capstan creates it on the git host with you, then you install it on the accounts whose repositories you deploy." : ""}
          </p>
          {admin && (
            <div class="row wrap githost-connect">
              <Field label="Organization (optional)" name="gh-organization" errors={errs.organization}
                hint="The app's owner; empty for your own account.">
                <input id="gh-organization" value={organization} autocomplete="off"
                  aria-describedby={errs.organization ? "gh-organization-error" : "gh-organization-hint"}
                  onInput={(e) => setOrganization((e.target as HTMLInputElement).value)} />
              </Field>
              <button type="button" class="primary" disabled={!!busy} onClick={() => void connect()}>
                Connect a GitHub App
              </button>
            </div>
          )}
        </>
      )}
      {busy && (
        <p class="muted" role="status">
          {busy}
        </p>
      )}
      <p class="muted">
        Webhook address for pushes: <code>{s.webhook_url}</code>
      </p>
      {confirm.dialog}
    </div>
  );
}

// GitHostReturn is where the git host sends the browser back to: after
// creating the app (with a code to complete it) or after installing it
// (with the installation to record). It finishes the step with the
// signed-in administrator's session, then shows the Applications screen.
export function GitHostReturn({ step }: { step: "manifest" | "setup" }) {
  useTitle("Git host", "Applications");
  const [problem, setProblem] = useState<Problem | null>(null);
  const [requested, setRequested] = useState(false);
  useEffect(() => {
    const q = new URLSearchParams(location.search);
    const fail = (err: unknown) => setProblem(asProblem(err));
    if (step === "manifest") {
      const r = manifestReturn(q);
      if ("problem" in r) return setProblem(r.problem);
      once("manifest " + r.code, () => ok(api.POST("/api/v1/githost/manifest/complete", { body: r }))).then(
        () => navigate("/applications?githost=connected", true),
        fail,
      );
      return;
    }
    const r = setupReturn(q);
    if ("problem" in r) return setProblem(r.problem);
    if ("requested" in r) return setRequested(true);
    once("setup " + r.installation_id, () => ok(api.POST("/api/v1/githost/installations", { body: r }))).then(
      () => navigate("/applications?githost=installed", true),
      fail,
    );
  }, []);
  const what = step === "manifest" ? "the GitHub App" : "the installation";
  return (
    <section class="githost-return" data-step={step} data-state={problem ? "failed" : requested ? "requested" : "working"}>
      <h1>
        {problem
          ? step === "manifest"
            ? "The GitHub App was not connected"
            : "The installation was not recorded"
          : requested
            ? "Installation requested"
            : step === "manifest"
              ? "Connecting the GitHub App"
              : "Recording the installation"}
      </h1>
      {problem ? (
        <ProblemBox problem={problem} />
      ) : requested ? (
        <p>
          The app's installation waits for an owner of the account to approve it on the git host; the git host then brings them
          back here to record it.
        </p>
      ) : (
        <p class="muted" role="status" aria-live="polite">
          Finishing {what} with the git host…
        </p>
      )}
      {(problem || requested) && (
        <p>
          <Link href="/applications">Back to Applications</Link>
        </p>
      )}
    </section>
  );
}

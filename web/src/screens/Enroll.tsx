import { useRef, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { CopyButton, Field, Link, ProblemBox, StatusBadge } from "../components/ui";
import { serverStatusAfter, useLive } from "../lib/live";
import { useAction } from "../lib/action";
import { useTitle } from "../lib/title";

type Enrollment = Schemas["Enrollment"];

// parseTags reads the tags field: comma- or space-separated, without
// empties or repeats.
export function parseTags(s: string): string[] {
  return [...new Set(s.split(/[\s,]+/).map((t) => t.trim()).filter(Boolean))];
}

// Enroll: name and tags, then the install command to run on the server,
// then waiting for its agent, which the stream reports live.
export function Enroll() {
  useTitle("Enroll a server", "Servers");
  const { problem, busy, errs, handleSubmit } = useAction();
  const [enrollment, setEnrollment] = useState<Enrollment | null>(null);
  const [status, setStatus] = useState("pending");
  const name = useRef<HTMLInputElement>(null);
  const tags = useRef<HTMLInputElement>(null);

  const submit = handleSubmit(async () => {
    const en = await ok(
      api.POST("/api/v1/servers/enrollments", { body: { name: name.current!.value.trim(), tags: parseTags(tags.current!.value) } }),
    );
    setEnrollment(en);
    setStatus(en.server.status);
  });

  useLive(
    ["event"],
    (data, type) => {
      if (!enrollment) return;
      if (type === "reset") {
        void ok(api.GET("/api/v1/servers/{id}", { params: { path: { id: enrollment.server.id } } }))
          .then((s) => setStatus(s.status))
          .catch(() => {});
        return;
      }
      const next = serverStatusAfter(data?.type);
      if (next && data?.subject?.id === enrollment.server.id) setStatus(next);
    },
    [enrollment?.server.id],
  );

  if (enrollment) {
    const srv = enrollment.server;
    return (
      <section class="enroll">
        <h1>Enroll {srv.name}</h1>
        <ol class="steps">
          <li>
            <h2>Run this on the server, as root</h2>
            <pre id="install-command">{enrollment.install_command}</pre>
            <CopyButton text={enrollment.install_command} label="Copy the install command" />
            <p class="muted">
              The command holds a one-time token, valid until {new Date(enrollment.expires_at).toLocaleString()}. It installs
              the agent as a systemd service.
            </p>
          </li>
          <li>
            <h2>Wait for the agent</h2>
            <p aria-live="polite" class="enroll-status">
              {status === "pending" ? (
                <>
                  <span class="spinner" aria-hidden="true" /> Waiting for the agent of <strong>{srv.name}</strong> to
                  connect…
                </>
              ) : (
                <>
                  <StatusBadge status={status} /> <strong>{srv.name}</strong> is {status}.{" "}
                  <Link href={"/servers/" + srv.id}>Open the server</Link>
                </>
              )}
            </p>
          </li>
        </ol>
      </section>
    );
  }

  return (
    <section class="enroll">
      <h1>Enroll a server</h1>
      <form onSubmit={submit} class="card form" aria-label="Enroll a server" noValidate>
        <ProblemBox problem={problem} fields={["name", "tags"]} />
        <Field label="Name" name="name" errors={errs.name} hint="Lowercase letters, digits and dashes, e.g. web-1.">
          <input ref={name} id="name" name="name" required autoFocus aria-invalid={errs.name ? true : undefined} />
        </Field>
        <Field label="Tags" name="tags" errors={errs.tags} hint="Optional, separated by commas, e.g. web, eu.">
          <input ref={tags} id="tags" name="tags" aria-invalid={errs.tags ? true : undefined} />
        </Field>
        <div class="row">
          <button type="submit" class="primary" disabled={busy}>
            Create the install command
          </button>
          <Link href="/servers" class="button">
            Cancel
          </Link>
        </div>
      </form>
    </section>
  );
}

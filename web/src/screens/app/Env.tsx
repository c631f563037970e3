import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../../api/client";
import { ProblemBox, Table } from "../../components/ui";
import { envChange, envFieldErrors, envRows, type EnvRow } from "../../lib/apps";
import { currentUser } from "../../lib/auth";
import { useAction } from "../../lib/action";

type Detail = Schemas["ApplicationDetail"];

// EnvEditor changes the environment without reading its values: they are
// write-only. It lists the names; a value can be replaced, a variable
// removed or added; the change is saved at once, for the next deployment.
export function EnvEditor({ app, onSaved }: { app: Detail; onSaved: (d: Detail) => void }) {
  const admin = currentUser()?.admin ?? false;
  const keys = (app.env ?? []).map((e) => e.key);
  const [rows, setRows] = useState<EnvRow[]>(() => envRows(keys));
  const { problem, busy, run } = useAction();
  const [sent, setSent] = useState<ReturnType<typeof envChange>>(null);
  const [saved, setSaved] = useState(false);
  const rowErrs = envFieldErrors(problem?.errors, sent);
  const change = envChange(rows);
  const set = (i: number, part: Partial<EnvRow>) => {
    setSaved(false);
    setRows((cur) => cur.map((r, j) => (j === i ? { ...r, ...part } : r)));
  };

  async function save(e: Event) {
    e.preventDefault();
    if (!change) return;
    await run(async () => {
      setSent(change);
      const d = await ok(api.PATCH("/api/v1/applications/{id}/env", { params: { path: { id: app.id } }, body: change }));
      setRows(envRows((d.env ?? []).map((x) => x.key)));
      setSaved(true);
      onSaved(d);
    });
  }

  if (!admin) {
    return (
      <div class="card">
        <h2>Environment</h2>
        <p class="muted">Values are stored encrypted; administrators set them.</p>
        <ul class="envkeys">
          {keys.map((k) => (
            <li key={k}>
              <code>{k}</code> <span class="muted">= ••••••</span>
            </li>
          ))}
        </ul>
        {keys.length === 0 && <p class="muted">No variables.</p>}
      </div>
    );
  }
  return (
    <form class="card form env-editor" aria-label="Environment" onSubmit={save} noValidate>
      <h2>Environment</h2>
      <p class="muted">
        Values are write-only: stored encrypted and never shown. Set a new value to replace one. Changes apply to the next deployment.
      </p>
      <ProblemBox problem={problem} fields={["set", "remove"]} />
      {rowErrs[""] && <p class="field-error" role="alert">{rowErrs[""].join("; ")}</p>}
      <div class="scroll-x">
        <Table label="Variables" columns={["Name", "Value", "Actions"]}>
          {rows.map((r, i) => {
            const name = r.key || `new variable ${i + 1}`;
            const err = rowErrs[r.key.trim()];
            return (
              <tr key={i} data-env={r.key} class={r.remove ? "removed" : ""}>
                <td>
                  {r.existing ? (
                    <code>{r.key}</code>
                  ) : (
                    <input class="mono" aria-label={`Name of ${name}`} placeholder="NAME" value={r.key} aria-invalid={err ? true : undefined}
                      onInput={(e) => set(i, { key: (e.target as HTMLInputElement).value })} />
                  )}
                  {err && (
                    <small class="field-error" role="alert">
                      {err.join("; ")}
                    </small>
                  )}
                </td>
                <td>
                  {r.remove ? (
                    <span class="muted">{r.existing ? "removed on save" : "dropped"}</span>
                  ) : r.value === null ? (
                    <span class="muted">•••••• (set)</span>
                  ) : (
                    <input type="password" autocomplete="new-password" aria-label={`New value of ${name}`} value={r.value}
                      onInput={(e) => set(i, { value: (e.target as HTMLInputElement).value })} />
                  )}
                </td>
                <td>
                  <div class="actions">
                    {r.existing && !r.remove && r.value === null && (
                      <button type="button" aria-label={`Replace value of ${r.key}`} onClick={() => set(i, { value: "" })}>
                        Replace value
                      </button>
                    )}
                    {r.existing && !r.remove && r.value !== null && (
                      <button type="button" aria-label={`Keep value of ${r.key}`} onClick={() => set(i, { value: null })}>
                        Keep value
                      </button>
                    )}
                    {r.remove ? (
                      <button type="button" aria-label={`Undo removing ${name}`} onClick={() => set(i, { remove: false })}>
                        Undo
                      </button>
                    ) : (
                      <button type="button" class="danger" aria-label={`Remove ${name}`} onClick={() => set(i, { remove: true })}>
                        Remove
                      </button>
                    )}
                  </div>
                </td>
              </tr>
            );
          })}
        </Table>
      </div>
      {rows.length === 0 && <p class="muted">No variables.</p>}
      <div class="row wrap">
        <button type="button" onClick={() => setRows((cur) => [...cur, { key: "", existing: false, value: "", remove: false }])}>
          Add a variable
        </button>
        <button type="submit" class="primary" disabled={busy || !change}>
          Save the environment
        </button>
        {saved && (
          <span role="status" class="ok-text">
            Saved: the next deployment gets it.
          </span>
        )}
      </div>
    </form>
  );
}

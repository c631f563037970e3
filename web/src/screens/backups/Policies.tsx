import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../../api/client";
import { Field, Link, Loading, ProblemBox, Table } from "../../components/ui";
import { currentUser } from "../../lib/auth";
import { policyBody, type PolicyForm } from "../../lib/backups";
import { useLive } from "../../lib/live";
import { useAction } from "../../lib/action";
import { useResource } from "../../lib/resource";
import { Ago } from "../../components/Ago";
import { useTitle } from "../../lib/title";
import { BackupsNav, type Policy } from "./shared";

// Policies lists every instance's backup policy; administrators change
// one at a time.
export function Policies() {
  useTitle("Policies", "Backups");
  const res = useResource(async () => (await ok(api.GET("/api/v1/backups/policies"))).policies ?? []);
  const [editing, setEditing] = useState<string | null>(null);
  const admin = currentUser()?.admin ?? false;
  useLive(["event"], (data, type) => {
    if (type === "reset" || data?.type === "backup.stale") void res.reload();
  });
  return (
    <section>
      <h1>Backups</h1>
      <BackupsNav at="policies" />
      <ProblemBox problem={res.problem} />
      {!res.data && !res.problem && <Loading what="policies" />}
      {res.data && (
        <div class="card scroll-x">
          <Table label="Backup policies" columns={["Instance", "Enabled", "Every", "Keep", "Databases", "Verify", "Next", "Stale", admin && "Actions"]}>
            {res.data.map((p) => (
              <tr key={p.instance_id} data-policy={p.instance_name}>
                <td>
                  <Link href={"/backups?instance_id=" + p.instance_id}>{p.instance_name}</Link> <span class="muted">{p.engine}</span>
                </td>
                <td>{p.enabled ? <span class="s-succeeded">on</span> : "off"}</td>
                <td>{p.every_hours} h</td>
                <td>{p.keep}</td>
                <td>{(p.databases ?? []).join(", ") || <span class="muted">{/^(redis|valkey)$/.test(p.engine) ? "whole instance" : "initial"}</span>}</td>
                <td>{p.verify ? "yes" : "no"}</td>
                <td>{p.next_due_at ? new Date(p.next_due_at).toLocaleString() : "–"}</td>
                <td>
                  {(p.stale ?? []).length
                    ? (p.stale ?? []).map((s) => (
                        <div key={s.database} class="lvl-error">
                          {s.database || "instance"} since <Ago at={s.since} />
                        </div>
                      ))
                    : "–"}
                </td>
                {admin && (
                  <td>
                    <button type="button" onClick={() => setEditing(p.instance_id)} aria-label={`Edit the policy of ${p.instance_name}`}>
                      Edit
                    </button>
                  </td>
                )}
              </tr>
            ))}
          </Table>
          {res.data.length === 0 && <p class="muted">No database instances: add one under Databases first.</p>}
        </div>
      )}
      {editing && res.data && (
        <PolicyEditor
          key={editing}
          policy={res.data.find((p) => p.instance_id === editing)!}
          onDone={(saved) => {
            setEditing(null);
            if (saved) res.set((list) => (list ? list.map((p) => (p.instance_id === saved.instance_id ? saved : p)) : list));
          }}
        />
      )}
    </section>
  );
}

function PolicyEditor({ policy, onDone }: { policy: Policy; onDone: (p: Policy | null) => void }) {
  const [form, setForm] = useState<PolicyForm>({
    enabled: policy.enabled,
    every_hours: String(policy.every_hours),
    keep: String(policy.keep),
    databases: (policy.databases ?? []).join(", "),
    verify: policy.verify,
  });
  const { problem, busy, errs, handleSubmit } = useAction();
  const set = (p: Partial<PolicyForm>) => setForm((f) => ({ ...f, ...p }));
  const kv = /^(redis|valkey)$/.test(policy.engine);

  const submit = handleSubmit(async () => {
    const saved = await ok(
      api.PUT("/api/v1/backups/policies/{instance_id}", {
        params: { path: { instance_id: policy.instance_id } },
        body: policyBody(form) as Schemas["BackupPolicyInputBody"],
      }),
    );
    onDone(saved);
  });
  const described = (n: string) => (errs[n] ? n + "-error" : n + "-hint");
  return (
    <form class="card form" onSubmit={submit} aria-label={`Policy of ${policy.instance_name}`} noValidate>
      <h2>Policy of {policy.instance_name}</h2>
      <ProblemBox problem={problem} fields={["enabled", "every_hours", "keep", "databases", "verify"]} />
      <label class="check">
        <input type="checkbox" checked={form.enabled} onChange={(e) => set({ enabled: e.currentTarget.checked })} /> Back up on a schedule
      </label>
      <div class="grid2 tight">
        <Field label="Every (hours)" name="every_hours" errors={errs.every_hours} hint="1 to 168">
          <input id="every_hours" type="number" min={1} max={168} value={form.every_hours} aria-invalid={errs.every_hours ? true : undefined}
            aria-describedby={described("every_hours")} onInput={(e) => set({ every_hours: e.currentTarget.value })} />
        </Field>
        <Field label="Keep" name="keep" errors={errs.keep} hint="Backups per database, 1 to 365">
          <input id="keep" type="number" min={1} max={365} value={form.keep} aria-invalid={errs.keep ? true : undefined}
            aria-describedby={described("keep")} onInput={(e) => set({ keep: e.currentTarget.value })} />
        </Field>
      </div>
      {!kv && (
        <Field label="Databases" name="databases" errors={errs.databases} hint="Separated by commas; empty: the initial database.">
          <input id="databases" value={form.databases} aria-invalid={errs.databases ? true : undefined} aria-describedby={described("databases")}
            onInput={(e) => set({ databases: e.currentTarget.value })} />
        </Field>
      )}
      <label class="check">
        <input type="checkbox" checked={form.verify} onChange={(e) => set({ verify: e.currentTarget.checked })} /> Verify every backup
        (test-restore it)
      </label>
      <div class="row">
        <button type="submit" class="primary" disabled={busy}>
          Save the policy
        </button>
        <button type="button" onClick={() => onDone(null)}>
          Cancel
        </button>
      </div>
    </form>
  );
}

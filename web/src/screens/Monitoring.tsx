import { useMemo, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { Field, FilterSelect, Link, Loading, ProblemBox, SubNav, Table, useConfirm } from "../components/ui";
import { currentUser } from "../lib/auth";
import { Ago } from "../components/Ago";
import { useLive } from "../lib/live";
import {
  alertSubject,
  countOpen,
  createBody,
  filterAlerts,
  kindLabel,
  newRuleForm,
  patchBody,
  ruleCondition,
  scopeLabels,
  scopeText,
  seconds,
  severities,
  unitText,
  type AlertFilter,
  type KindSpec,
  type RuleForm,
} from "../lib/monitoring";
import { useAction } from "../lib/action";
import { asProblem, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import { useLocation } from "../lib/router";
import "./ops.css";
import { useTitle } from "../lib/title";

type Alert = Schemas["Alert"];
type Rule = Schemas["Rule"];

function MonitoringNav({ at }: { at: "alerts" | "rules" }) {
  return (
    <SubNav
      label="Monitoring"
      items={[
        { href: "/monitoring", label: "Alerts", current: at === "alerts" },
        { href: "/monitoring/rules", label: "Rules", current: at === "rules" },
      ]}
    />
  );
}

function Severity({ s }: { s: string }) {
  return <span class={"badge sev-" + s}>{s}</span>;
}

// Alerts lists open (or resolved) alerts, newest first, kept current from
// the stream; administrators acknowledge open ones.
export function Alerts() {
  useTitle("Alerts", "Monitoring");
  // A notification's link names its alert: show every state, and mark it.
  const target = useLocation().query.get("alert");
  const [state, setState] = useState<"open" | "resolved" | "all">(target ? "all" : "open");
  const [filter, setFilter] = useState<AlertFilter>({ severity: "", kind: "", text: "", unacknowledged: false });
  const [more, setMore] = useState<{ alerts: Alert[]; cursor?: string }>({ alerts: [] });
  const [actionProblem, setProblem] = useState<Problem | null>(null);
  const admin = currentUser()?.admin ?? false;
  const me = currentUser()?.id;
  const res = useResource(async () => {
    const r = await ok(api.GET("/api/v1/monitoring/alerts", { params: { query: { state, limit: 100 } } }));
    setMore({ alerts: [], cursor: r.next_cursor });
    return r.alerts ?? [];
  }, [state]);
  const problem = actionProblem ?? res.problem;
  useLive(["event"], (data, type) => {
    if (type === "reset" || /^alert\./.test(data?.type ?? "")) void res.reload();
  });

  async function loadMore() {
    try {
      const r = await ok(api.GET("/api/v1/monitoring/alerts", { params: { query: { state, limit: 100, before: more.cursor } } }));
      setMore((m) => ({ alerts: [...m.alerts, ...(r.alerts ?? [])], cursor: r.next_cursor }));
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  async function acknowledge(a: Alert) {
    setProblem(null);
    try {
      const done = await ok(api.POST("/api/v1/monitoring/alerts/{id}/acknowledge", { params: { path: { id: a.id } } }));
      res.set((list) => (list ? list.map((x) => (x.id === done.id ? done : x)) : list));
      setMore((m) => ({ ...m, alerts: m.alerts.map((x) => (x.id === done.id ? done : x)) }));
    } catch (err) {
      setProblem(asProblem(err));
      void res.reload();
    }
  }

  const all = useMemo(() => [...(res.data ?? []), ...more.alerts], [res.data, more.alerts]);
  const shown = useMemo(() => filterAlerts(all, filter), [all, filter]);
  const kinds = useMemo(() => [...new Set(all.map((a) => a.kind))].sort(), [all]);
  const open = countOpen(all);

  return (
    <section>
      <h1>Monitoring</h1>
      <MonitoringNav at="alerts" />
      <ProblemBox problem={problem} />
      <div class="filters" role="search" aria-label="Filter alerts">
        <FilterSelect id="alert-state" label="State" value={state} onChange={(v) => setState(v as typeof state)}
          options={[{ value: "open", label: "Open" }, { value: "resolved", label: "Resolved" }, { value: "all", label: "Open and resolved" }]} />
        <FilterSelect id="alert-severity" label="Severity" value={filter.severity} onChange={(v) => setFilter({ ...filter, severity: v })}
          options={[{ value: "", label: "Any severity" }, ...severities]} />
        <FilterSelect id="alert-kind" label="Kind" value={filter.kind} onChange={(v) => setFilter({ ...filter, kind: v })}
          options={[{ value: "", label: "Any kind" }, ...kinds.map((k) => ({ value: k, label: kindLabel(k) }))]} />
        <div class="grow">
          <label class="sr-only" for="alert-text">
            Subject
          </label>
          <input id="alert-text" type="search" placeholder="Server, application, domain…" value={filter.text}
            onInput={(e) => setFilter({ ...filter, text: e.currentTarget.value })} />
        </div>
        <label class="check">
          <input type="checkbox" checked={filter.unacknowledged} onChange={(e) => setFilter({ ...filter, unacknowledged: e.currentTarget.checked })} />
          Not acknowledged
        </label>
      </div>
      {state !== "resolved" && res.data && (
        <p class="counts" aria-live="polite">
          <span>
            <strong>{open.critical}</strong> critical
          </span>
          <span>
            <strong>{open.warning}</strong> warning
          </span>
          <span>
            <strong>{open.info}</strong> info
          </span>
          <span class="muted">open</span>
        </p>
      )}
      {!res.data && !res.problem && <Loading what="alerts" />}
      {res.data && (
        <div class="card scroll-x">
          <Table label="Alerts" columns={["Severity", "Alert", "Subject", "Value", "Opened", "State", "Acknowledged"]}>
            {shown.map((a) => (
              <tr key={a.id} data-alert={a.id} class={a.id === target ? "target" : undefined}
                aria-current={a.id === target ? "true" : undefined}>
                <td>
                  <Severity s={a.severity} />
                </td>
                <td>{kindLabel(a.kind)}</td>
                <td>
                  <SubjectLink a={a} />
                </td>
                <td>
                  {unitText(a.value, a.unit)}
                  {a.unit !== "none" && <span class="muted"> (rule {unitText(a.threshold, a.unit)})</span>}
                </td>
                <td title={new Date(a.opened_at).toLocaleString()}><Ago at={a.opened_at} /></td>
                <td>
                  <span class={"badge st-" + a.state}>{a.state}</span>
                  {a.resolved_at && <span class="muted"> <Ago at={a.resolved_at} /></span>}
                </td>
                <td>
                  {a.acknowledged_at ? (
                    <span class="acked">
                      ✓ {a.acknowledged_by === me ? "by you" : "by " + a.acknowledged_by} <Ago at={a.acknowledged_at} />
                    </span>
                  ) : a.state === "open" && admin ? (
                    <button type="button" onClick={() => void acknowledge(a)} aria-label={`Acknowledge ${kindLabel(a.kind)} on ${alertSubject(a)}`}>
                      Acknowledge
                    </button>
                  ) : (
                    <span class="muted">–</span>
                  )}
                </td>
              </tr>
            ))}
          </Table>
          {all.length === 0 && <p class="muted">{state === "open" ? "No open alerts: all is well." : "No alerts."}</p>}
          {all.length > 0 && shown.length === 0 && <p class="muted">No alert matches the filters.</p>}
          {more.cursor && (
            <button type="button" onClick={() => void loadMore()}>
              Older alerts
            </button>
          )}
        </div>
      )}
    </section>
  );
}

function SubjectLink({ a }: { a: Alert }) {
  const text = alertSubject(a);
  const kind = a.kind;
  if (["agent_offline", "cpu_high", "memory_high", "disk_high", "inode_high", "swap_high"].includes(kind))
    return <Link href={"/servers/" + a.subject.id}>{text}</Link>;
  return <span>{text}</span>;
}

interface Targets {
  servers: { id: string; name: string; tags?: string[] | null }[];
  applications: { id: string; name: string }[];
  domains: { id: string; hostname: string }[];
  instances: { id: string; name: string; engine: string }[];
}

// Rules lists the alert rules; administrators create, change, enable or
// disable and delete them.
export function Rules() {
  useTitle("Alert rules", "Monitoring");
  const res = useResource(async () => {
    const r = await ok(api.GET("/api/v1/monitoring/rules"));
    return { rules: r.rules ?? [], kinds: (r.kinds ?? []) as KindSpec[] };
  });
  // What a rule's scope can name; a list this user cannot read stays empty.
  const targets = useResource<Targets>(async () => {
    const [servers, applications, domains, instances] = await Promise.all([
      ok(api.GET("/api/v1/servers")).then((r) => r.servers ?? [], () => []),
      ok(api.GET("/api/v1/applications")).then((r) => r.applications ?? [], () => []),
      ok(api.GET("/api/v1/domains")).then((r) => r.domains ?? [], () => []),
      ok(api.GET("/api/v1/databases")).then((r) => r.databases ?? [], () => []),
    ]);
    return { servers, applications, domains, instances };
  });
  const [actionProblem, setProblem] = useState<Problem | null>(null);
  const [editing, setEditing] = useState<Rule | "new" | null>(null);
  const confirm = useConfirm((r: Rule) => ({ title: "Delete the rule", action: "Delete", object: `rule ${r.name}`, run: () => remove(r) }));
  const admin = currentUser()?.admin ?? false;
  const problem = actionProblem ?? res.problem;
  useLive([], (_d, type) => type === "reset" && void res.reload());

  const names = useMemo(() => {
    const out: Record<string, string> = {};
    const t = targets.data;
    if (!t) return out;
    for (const s of t.servers) out[s.id] = s.name;
    for (const a of t.applications) out[a.id] = a.name;
    for (const d of t.domains) out[d.id] = d.hostname;
    for (const i of t.instances) out[i.id] = i.name;
    return out;
  }, [targets.data]);

  async function toggle(r: Rule, enabled: boolean) {
    setProblem(null);
    try {
      const next = await ok(api.PATCH("/api/v1/monitoring/rules/{id}", { params: { path: { id: r.id } }, body: { enabled } }));
      res.set((d) => (d ? { ...d, rules: d.rules.map((x) => (x.id === next.id ? next : x)) } : d));
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  async function remove(r: Rule) {
    setProblem(null);
    try {
      await ok(api.DELETE("/api/v1/monitoring/rules/{id}", { params: { path: { id: r.id } } }));
      res.set((d) => (d ? { ...d, rules: d.rules.filter((x) => x.id !== r.id) } : d));
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  const data = res.data;
  return (
    <section>
      <div class="row wrap between">
        <h1>Monitoring</h1>
        {admin && data && !editing && (
          <button type="button" class="primary" onClick={() => setEditing("new")}>
            New rule
          </button>
        )}
      </div>
      <MonitoringNav at="rules" />
      <ProblemBox problem={problem} />
      {editing && data && (
        <RuleEditor
          key={editing === "new" ? "new" : editing.id}
          rule={editing === "new" ? null : editing}
          kinds={data.kinds}
          targets={targets.data}
          onDone={(saved) => {
            setEditing(null);
            if (saved)
              res.set((d) =>
                d ? { ...d, rules: d.rules.some((x) => x.id === saved.id) ? d.rules.map((x) => (x.id === saved.id ? saved : x)) : [...d.rules, saved] } : d,
              );
          }}
        />
      )}
      {!data && !res.problem && <Loading what="rules" />}
      {data && (
        <div class="card scroll-x">
          <Table label="Alert rules" columns={["Name", "Watches", "Scope", "Severity", "Enabled", admin && "Actions"]}>
            {data.rules.map((r) => (
              <tr key={r.id} data-rule={r.id}>
                <td>{r.name}</td>
                <td>{ruleCondition(r)}</td>
                <td>{scopeText(r, names)}</td>
                <td>
                  <Severity s={r.severity} />
                </td>
                <td>
                  {admin ? (
                    <label class="check">
                      <input type="checkbox" checked={r.enabled} onChange={(e) => void toggle(r, e.currentTarget.checked)}
                        aria-label={`${r.name} enabled`} />
                      <span aria-hidden="true">{r.enabled ? "on" : "off"}</span>
                    </label>
                  ) : r.enabled ? (
                    "on"
                  ) : (
                    "off"
                  )}
                </td>
                {admin && (
                  <td>
                    <div class="actions">
                      <button type="button" onClick={() => setEditing(r)} aria-label={`Edit ${r.name}`}>
                        Edit
                      </button>
                      <button type="button" class="danger" onClick={() => confirm.ask(r)} aria-label={`Delete ${r.name}`}>
                        Delete
                      </button>
                    </div>
                  </td>
                )}
              </tr>
            ))}
          </Table>
          {data.rules.length === 0 && <p class="muted">No rules: nothing is watched.</p>}
        </div>
      )}
      {confirm.dialog}
    </section>
  );
}

function RuleEditor(props: { rule: Rule | null; kinds: KindSpec[]; targets: Targets | null; onDone: (saved: Rule | null) => void }) {
  const { rule, kinds, targets } = props;
  const [form, setForm] = useState<RuleForm>(() =>
    rule
      ? {
          kind: rule.kind,
          name: rule.name,
          scope: rule.scope,
          scope_id: rule.scope_id ?? "",
          threshold: String(rule.threshold),
          duration: String(rule.duration),
          severity: rule.severity,
          enabled: rule.enabled,
        }
      : newRuleForm(kinds.find((k) => k.kind === "cpu_high") ?? kinds[0]),
  );
  const { problem, busy, errs, handleSubmit } = useAction();
  const spec = kinds.find((k) => k.kind === form.kind);
  const set = (patch: Partial<RuleForm>) => setForm((f) => ({ ...f, ...patch }));
  const fields = ["kind", "name", "scope", "scope_id", "threshold", "duration", "severity", "enabled"];

  const submit = handleSubmit(async () => {
    const saved = rule
      ? await ok(api.PATCH("/api/v1/monitoring/rules/{id}", { params: { path: { id: rule.id } }, body: patchBody(rule, form) as Schemas["RulePatch"] }))
      : await ok(api.POST("/api/v1/monitoring/rules", { body: createBody(form) as Schemas["NewRule"] }));
    props.onDone(saved);
  });

  const inv = (name: string) => (errs[name] ? true : undefined);
  const desc = (name: string) => (errs[name] ? name + "-error" : name + "-hint");
  return (
    <form class="card form rule-form" onSubmit={submit} aria-label={rule ? `Edit rule ${rule.name}` : "New rule"} noValidate>
      <h2>{rule ? `Edit ${rule.name}` : "New rule"}</h2>
      <ProblemBox problem={problem} fields={fields} />
      <Field label="Kind" name="kind" errors={errs.kind} hint={spec?.condition}>
        <select id="kind" value={form.kind} disabled={!!rule} aria-invalid={inv("kind")} aria-describedby={desc("kind")}
          onChange={(e) => {
            const k = kinds.find((x) => x.kind === e.currentTarget.value);
            if (k) setForm((f) => ({ ...newRuleForm(k), name: f.name }));
          }}>
          {kinds.map((k) => (
            <option key={k.kind} value={k.kind}>
              {kindLabel(k.kind)}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Name" name="name" errors={errs.name} hint="Optional: the kind's name when empty.">
        <input id="name" value={form.name} maxLength={100} aria-invalid={inv("name")} aria-describedby={desc("name")}
          onInput={(e) => set({ name: e.currentTarget.value })} />
      </Field>
      <div class="grid2 tight">
        <Field label="Scope" name="scope" errors={errs.scope}>
          <select id="scope" value={form.scope} disabled={!!rule} aria-invalid={inv("scope")}
            onChange={(e) => set({ scope: e.currentTarget.value, scope_id: "" })}>
            {(spec?.scopes ?? ["all"]).map((s) => (
              <option key={s} value={s}>
                {scopeLabels[s] ?? s}
              </option>
            ))}
          </select>
        </Field>
        {form.scope !== "all" && (
          <Field label={targetLabels[form.scope] ?? "Target"} name="scope_id" errors={errs.scope_id}>
            <ScopeTarget scope={form.scope} value={form.scope_id} targets={targets} disabled={!!rule} invalid={!!errs.scope_id}
              onChange={(v) => set({ scope_id: v })} />
          </Field>
        )}
      </div>
      <div class="grid2 tight">
        {spec && spec.unit !== "none" && (
          <Field label={`Threshold (${spec.unit})`} name="threshold" errors={errs.threshold} hint={`${spec.min} to ${spec.max} ${spec.unit}`}>
            <input id="threshold" type="number" inputMode="decimal" min={spec.min} max={spec.max} step="any" value={form.threshold}
              aria-invalid={inv("threshold")} aria-describedby={desc("threshold")} onInput={(e) => set({ threshold: e.currentTarget.value })} />
          </Field>
        )}
        <Field label="Holds for (seconds)" name="duration" errors={errs.duration}
          hint={`0 to 86400; now ${seconds(Number(form.duration) || 0)}`}>
          <input id="duration" type="number" inputMode="numeric" min={0} max={86400} value={form.duration} aria-invalid={inv("duration")}
            aria-describedby={desc("duration")} onInput={(e) => set({ duration: e.currentTarget.value })} />
        </Field>
        <Field label="Severity" name="severity" errors={errs.severity}>
          <select id="severity" value={form.severity} aria-invalid={inv("severity")} onChange={(e) => set({ severity: e.currentTarget.value })}>
            {severities.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </Field>
      </div>
      <label class="check">
        <input type="checkbox" checked={form.enabled} onChange={(e) => set({ enabled: e.currentTarget.checked })} /> Enabled
      </label>
      <div class="row">
        <button type="submit" class="primary" disabled={busy}>
          {rule ? "Save the rule" : "Create the rule"}
        </button>
        <button type="button" onClick={() => props.onDone(null)}>
          Cancel
        </button>
      </div>
    </form>
  );
}

const targetLabels: Record<string, string> = {
  tag: "Tag",
  server: "Server",
  application: "Application",
  domain: "Domain",
  instance: "Database instance",
};

function ScopeTarget(props: {
  scope: string;
  value: string;
  targets: Targets | null;
  disabled: boolean;
  invalid: boolean;
  onChange: (v: string) => void;
}) {
  const t = props.targets;
  const options: { id: string; label: string }[] =
    props.scope === "server"
      ? (t?.servers ?? []).map((s) => ({ id: s.id, label: s.name }))
      : props.scope === "application"
        ? (t?.applications ?? []).map((a) => ({ id: a.id, label: a.name }))
        : props.scope === "domain"
          ? (t?.domains ?? []).map((d) => ({ id: d.id, label: d.hostname }))
          : props.scope === "instance"
            ? (t?.instances ?? []).map((i) => ({ id: i.id, label: `${i.name} (${i.engine})` }))
            : [];
  if (props.scope === "tag") {
    const tags = [...new Set((t?.servers ?? []).flatMap((s) => s.tags ?? []))].sort();
    return (
      <>
        <input id="scope_id" list="scope-tags" value={props.value} disabled={props.disabled} aria-invalid={props.invalid || undefined}
          onInput={(e) => props.onChange(e.currentTarget.value)} />
        <datalist id="scope-tags">
          {tags.map((x) => (
            <option key={x} value={x} />
          ))}
        </datalist>
      </>
    );
  }
  const known = options.some((o) => o.id === props.value);
  return (
    <select id="scope_id" value={props.value} disabled={props.disabled} aria-invalid={props.invalid || undefined}
      onChange={(e) => props.onChange(e.currentTarget.value)}>
      <option value="">Choose…</option>
      {!known && props.value && <option value={props.value}>{props.value}</option>}
      {options.map((o) => (
        <option key={o.id} value={o.id}>
          {o.label}
        </option>
      ))}
    </select>
  );
}

import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { Field, Link, Loading, ProblemBox, Table } from "../components/ui";
import { auditSentence } from "../lib/audit";
import { auditQuery, emptyAuditFilter, filterFromURL, filterToURL, type AuditFilter } from "../lib/admin";
import { asProblem, fieldErrors, type Problem } from "../lib/problem";
import { navigate } from "../lib/router";
import { useResource } from "../lib/resource";
import "./admin.css";
import { useTitle } from "../lib/title";

type Entry = Schemas["Entry"];

const PAGE = 50;

// Audit: who did what, to what, when and from where, newest first, with
// filters kept in the address and older pages on demand.
export function Audit() {
  useTitle("Audit log");
  const [filter, setFilter] = useState<AuditFilter>(() => filterFromURL(new URLSearchParams(location.search)));
  const [draft, setDraft] = useState<AuditFilter>(filter);
  const res = useResource(async () => {
    const body = await ok(api.GET("/api/v1/audit-logs", { params: { query: { limit: PAGE, ...auditQuery(filter) } } }));
    return { entries: body.entries ?? [], next: body.next_cursor ?? null };
  }, [filter]);
  const [moreProblem, setMoreProblem] = useState<Problem | null>(null);
  const [busy, setBusy] = useState(false);
  const problem = moreProblem ?? res.problem;
  const errs = fieldErrors(res.problem);
  const page = res.data;

  function apply(f: AuditFilter) {
    setMoreProblem(null);
    setFilter(f);
    setDraft(f);
    navigate(location.pathname + filterToURL(f), true);
  }

  async function older() {
    if (!page?.next) return;
    setBusy(true);
    try {
      const body = await ok(api.GET("/api/v1/audit-logs", { params: { query: { limit: PAGE, ...auditQuery(filter, page.next) } } }));
      res.set((cur) => (cur ? { entries: [...cur.entries, ...(body.entries ?? [])], next: body.next_cursor ?? null } : cur));
    } catch (err) {
      setMoreProblem(asProblem(err));
    } finally {
      setBusy(false);
    }
  }

  const input = (k: keyof AuditFilter, label: string, type = "text", hint?: string) => (
    <Field label={label} name={"audit-" + k} errors={errs[k]} hint={hint}>
      <input
        id={"audit-" + k}
        type={type}
        value={draft[k]}
        onInput={(e) => setDraft({ ...draft, [k]: (e.target as HTMLInputElement).value })}
        data-search={k === "action" ? "" : undefined}
      />
    </Field>
  );

  return (
    <section class="admin">
      <h1>Audit log</h1>
      <form
        class="card audit-filters"
        role="search"
        aria-label="Filter the audit log"
        onSubmit={(e) => {
          e.preventDefault();
          apply(draft);
        }}
      >
        {input("action", "Action", "search", "auth.login.failed, or auth.*")}
        {input("actor", "Actor", "text", "E-mail or id")}
        {input("target_type", "Object type", "text", "server, application, …")}
        {input("target_id", "Object id")}
        {input("since", "From", "datetime-local")}
        {input("until", "Until", "datetime-local")}
        <div class="row wrap">
          <button type="submit" class="primary">
            Filter
          </button>
          <button type="button" onClick={() => apply(emptyAuditFilter)}>
            Clear
          </button>
        </div>
      </form>
      <ProblemBox problem={problem} fields={Object.keys(emptyAuditFilter)} />
      {!page && !res.problem && <Loading what="the audit log" />}
      {page && (
        <>
          <p class="muted" aria-live="polite">
            {page.entries.length} {page.entries.length === 1 ? "entry" : "entries"}
            {page.next ? " shown, older ones below" : ""}
          </p>
          {page.entries.length > 0 && (
            <div class="card scroll-x">
              <Table label="Audit log" columns={["When", "What", "From", { label: "Raw entry", hidden: true }]}>
                {page.entries.map((e) => (
                  <AuditRow key={e.id} e={e} onFilter={(f) => apply({ ...filter, ...f })} />
                ))}
              </Table>
            </div>
          )}
          {page.entries.length === 0 && <p class="card empty">No entry matches.</p>}
          {page.next && (
            <button type="button" disabled={busy} onClick={() => void older()}>
              Older entries
            </button>
          )}
        </>
      )}
    </section>
  );
}

function objectLink(t: Entry["target"]): string | null {
  if (!t.id) return null;
  switch (t.type) {
    case "server":
      return "/servers/" + t.id;
    case "notification_channel":
      return "/notifications/channels/" + t.id;
    case "application":
      return "/applications/" + t.id;
    case "database":
      return "/databases/" + t.id;
    case "backup":
      return "/backups/runs/" + t.id;
    case "token":
      return "/platform/tokens";
    default:
      return null;
  }
}

// AuditRow is an entry as a sentence, with its actor and action as
// filters, a link to its object, and the raw entry behind a toggle.
function AuditRow({ e, onFilter }: { e: Entry; onFilter: (f: Partial<AuditFilter>) => void }) {
  const who = e.actor.email || e.actor.id || e.actor.type;
  const href = objectLink(e.target);
  const at = new Date(e.at);
  return (
    <tr data-audit={e.action}>
      <td>
        <time dateTime={e.at} title={at.toLocaleString()}>
          {at.toLocaleString([], { dateStyle: "medium", timeStyle: "medium" })}
        </time>
      </td>
      <td class="wrap-any">
        <span class="audit-sentence">{auditSentence(e)}</span>
        <span class="audit-meta muted">
          <button type="button" class="linkish" title="Show only this actor" onClick={() => onFilter({ actor: e.actor.email || e.actor.id })}>
            {who}
          </button>
          {" · "}
          <button type="button" class="linkish" title="Show only this action" onClick={() => onFilter({ action: e.action })}>
            <code>{e.action}</code>
          </button>
          {e.target.id && (
            <>
              {" · "}
              {e.target.type && <span>{e.target.type} </span>}
              {href ? <Link href={href}>{e.target.id}</Link> : <code>{e.target.id}</code>}
            </>
          )}
        </span>
      </td>
      <td class="wrap-any">{e.ip}</td>
      <td>
        <details class="audit-raw">
          <summary>JSON</summary>
          <pre class="details">{JSON.stringify(e, null, 2)}</pre>
        </details>
      </td>
    </tr>
  );
}

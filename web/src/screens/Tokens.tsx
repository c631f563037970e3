import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { Ago } from "../components/Ago";
import { BackLink, CopyButton, Field, Loading, ProblemBox, StatusBadge, Table, useConfirm } from "../components/ui";
import { currentUser } from "../lib/auth";
import { fromColumns } from "../lib/fleet";
import { useAction } from "../lib/action";
import { asProblem, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import { useTitle } from "../lib/title";
import {
  defaultExpiry, describeResource, expiries, expiryBody, formErrors, memberScopes, orderScopes, problemFields, resource, resourceKinds, scopes,
  tokenState, untilText, type Expiry, type Names, type ResourceKind,
} from "../lib/tokens";
import "./admin.css";
import "./tokens.css";

type Token = Schemas["APIToken"];
type Created = Schemas["CreatedToken"];

// What a token can be narrowed to: the applications, servers (with their
// tags) and database instances this user reads; a list that fails to
// load stays empty.
interface Targets {
  apps: { id: string; name: string }[];
  servers: { id: string; name: string; tags: string[] }[];
  dbs: { id: string; name: string }[];
}

async function loadTargets(): Promise<Targets> {
  const [apps, servers, dbs] = await Promise.all([
    ok(api.GET("/api/v1/applications")).then((r) => r.applications ?? [], () => []),
    ok(api.GET("/api/v1/servers/compact")).then((r) => fromColumns(r), () => []),
    ok(api.GET("/api/v1/databases")).then((r) => r.databases ?? [], () => []),
  ]);
  return {
    apps: apps.map((a) => ({ id: a.id, name: a.name })),
    servers: servers.map((s) => ({ id: s.id, name: s.name, tags: s.tags })),
    dbs: dbs.map((d) => ({ id: d.id, name: d.name })),
  };
}

// Tokens: the API tokens this user sees (an administrator everyone's, a
// member their own), live, expired and revoked, with revoke for live
// ones, and the form that makes one and shows its secret once.
export function Tokens() {
  useTitle("API tokens", "Platform");
  const me = currentUser();
  const admin = me?.admin ?? false;
  const res = useResource(async () => (await ok(api.GET("/api/v1/tokens"))).tokens ?? [], []);
  const targets = useResource(loadTargets, []);
  const [created, setCreated] = useState<Created | null>(null);
  const [problem, setProblem] = useState<Problem | null>(null);

  const names = useMemo(() => {
    const out: Names = {};
    const t = targets.data;
    if (!t) return out;
    for (const a of t.apps) out[a.id] = a.name;
    for (const s of t.servers) out[s.id] = s.name;
    for (const d of t.dbs) out[d.id] = d.name;
    return out;
  }, [targets.data]);

  async function revoke(t: Token) {
    setProblem(null);
    try {
      await ok(api.DELETE("/api/v1/tokens/{id}", { params: { path: { id: t.id } } }));
    } catch (err) {
      setProblem(asProblem(err));
    }
    await res.reload();
  }

  const confirm = useConfirm<Token>((t) => ({
    title: "Revoke the API token", object: `token ${t.name}`, action: "Revoke", run: () => revoke(t),
    children: (
      <p>
        Every call with it is refused from now on, on every control plane{t.user_id !== me?.id ? `; its owner, ${t.user_email}, is not asked` : ""}.
        A revoked token cannot be restored: make a new one instead.
      </p>
    ),
  }));

  const list = res.data;
  return (
    <section class="admin tokens" aria-labelledby="tokens-title">
      <BackLink href="/platform" label="Platform" />
      <h1 id="tokens-title">API tokens</h1>
      <p class="muted tokens-note">
        A token lets a pipeline or a script call the API as you, with the scopes you give it, never more than your role allows at the
        moment it is used. Send it as <code>Authorization: Bearer cpt_…</code>; <code>GET /api/v1/tokens/current</code> says what it
        may do. {admin ? "As an administrator you see everyone's tokens, and may revoke any." : "You see and revoke your own tokens."}
      </p>
      {created ? (
        <SecretOnce token={created} onDone={() => setCreated(null)} />
      ) : (
        <NewToken admin={admin} targets={targets.data} names={names}
          onCreated={(t) => {
            setCreated(t);
            void res.reload();
          }} />
      )}
      <div class="row wrap between">
        <h2>{admin ? "Tokens" : "Your tokens"}</h2>
        <button type="button" onClick={() => void res.reload()} disabled={res.loading}>
          Refresh
        </button>
      </div>
      <ProblemBox problem={problem ?? res.problem} />
      {!list && !res.problem && <Loading what="tokens" />}
      {list && list.length === 0 && <p class="card empty">No tokens yet.</p>}
      {list && list.length > 0 && (
        <div class="card scroll-x">
          <Table label="API tokens"
            columns={["Name", admin && "Owner", "Scopes", "Resources", "Created", "Expires", "Last used", "State", { label: "Actions", hidden: true }]}>
            {list.map((t) => (
              <TokenRow key={t.id} t={t} admin={admin} mine={t.user_id === me?.id} names={names} onRevoke={() => confirm.ask(t)} />
            ))}
          </Table>
        </div>
      )}
      {confirm.dialog}
    </section>
  );
}

function TokenRow(props: { t: Token; admin: boolean; mine: boolean; names: Names; onRevoke: () => void }) {
  const { t } = props;
  const state = tokenState(t);
  const res = t.resources ?? [];
  return (
    <tr data-token={t.name} data-token-id={t.id} data-state={state}>
      <td class="wrap-any">
        <strong title={t.id}>{t.name}</strong>
      </td>
      {props.admin && (
        <td class="wrap-any">
          {t.user_email}
          {props.mine && <span class="muted"> (you)</span>}
        </td>
      )}
      <td data-scopes>
        {(t.scopes ?? []).map((s) => (
          <code key={s} class="scope-name">{s}</code>
        ))}
      </td>
      <td class="wrap-any" data-resources>
        {res.length === 0 ? (
          <span class="muted">everything</span>
        ) : (
          <ul class="plain-list">
            {res.map((r) => (
              <li key={r} title={r}>{describeResource(r, props.names)}</li>
            ))}
          </ul>
        )}
      </td>
      <td>
        <Ago at={t.created_at} />
      </td>
      <td data-expires>
        {!t.expires_at ? (
          "never"
        ) : state === "expired" ? (
          <Ago at={t.expires_at} />
        ) : (
          <time dateTime={t.expires_at} title={new Date(t.expires_at).toLocaleString()}>
            {untilText(t.expires_at)}
          </time>
        )}
      </td>
      <td class="wrap-any" data-last-used>
        <Ago at={t.last_used_at} />
        {t.last_used_ip && (
          <>
            {" "}
            <span class="muted">from</span> <code data-last-used-ip>{t.last_used_ip}</code>
          </>
        )}
      </td>
      <td>
        <StatusBadge status={state} />
        {t.revoked_at && (
          <small class="muted state-when">
            <Ago at={t.revoked_at} />
          </small>
        )}
      </td>
      <td>
        {state === "live" && (
          <button type="button" class="danger" aria-label={`Revoke token ${t.name}`} onClick={props.onRevoke}>
            Revoke
          </button>
        )}
      </td>
    </tr>
  );
}

// SecretOnce shows a new token's secret, the only time it is shown.
function SecretOnce({ token, onDone }: { token: Created; onDone: () => void }) {
  const field = useRef<HTMLInputElement>(null);
  useEffect(() => {
    field.current?.focus();
    field.current?.select();
  }, []);
  return (
    <div class="card secret-once token-secret" role="status" aria-labelledby="token-secret-title">
      <h2 id="token-secret-title">Token {token.name} made</h2>
      <p>
        <strong>Copy it now: you will not see it again.</strong> Capstan keeps only its hash; if it is lost, revoke it and make a new one.
      </p>
      <Field label="Your new token" name="token-secret">
        <input ref={field} id="token-secret" readOnly value={token.token} data-token-secret spellcheck={false}
          autoComplete="off" onFocus={(e) => e.currentTarget.select()} />
      </Field>
      <p class="muted">
        Scopes {(token.scopes ?? []).join(", ")}; {token.expires_at ? <>expires {new Date(token.expires_at).toLocaleDateString()}</> : "never expires"}.
      </p>
      <div class="row wrap">
        <CopyButton text={token.token} label="Copy the token" />
        <button type="button" class="primary" onClick={onDone}>
          Done
        </button>
      </div>
    </div>
  );
}

// NewToken is the form that makes a token: its name, scopes (a member's
// only read), what it is narrowed to and when it expires.
function NewToken(props: { admin: boolean; targets: Targets | null; names: Names; onCreated: (t: Created) => void }) {
  const [name, setName] = useState("");
  const [chosen, setChosen] = useState<Set<string>>(() => new Set(["read"]));
  const [resources, setResources] = useState<string[]>([]);
  const [expiry, setExpiry] = useState<Expiry>(defaultExpiry);
  const { problem, busy, handleSubmit } = useAction();
  // The resources as sent: a refusal names each by its place in this list.
  const [sent, setSent] = useState<string[]>([]);
  const errs = formErrors(problem);
  const itemErrors: Record<string, string[]> = {};
  for (const [i, e] of Object.entries(errs.resource)) if (sent[Number(i)]) itemErrors[sent[Number(i)]] = e;
  const form = useRef<HTMLFormElement>(null);
  const allowed = (id: string) => props.admin || memberScopes.includes(id);

  const submit = handleSubmit(async () => {
    setSent(resources);
    const t = await ok(api.POST("/api/v1/tokens", {
      body: { name: name.trim(), scopes: orderScopes(chosen), ...(resources.length ? { resources } : {}), ...expiryBody(expiry) },
    }));
    setName("");
    setChosen(new Set(["read"]));
    setResources([]);
    setExpiry(defaultExpiry);
    props.onCreated(t);
  });

  // After a refusal, the first field at fault (or the problem) comes into view.
  useEffect(() => {
    if (!problem) return;
    const el = form.current?.querySelector<HTMLElement>('[aria-invalid="true"]') ?? form.current?.querySelector<HTMLElement>(".problem");
    el?.scrollIntoView({ block: "center" });
    if (el?.matches("input, select, textarea")) el.focus();
  }, [problem]);

  function toggle(id: string, on: boolean) {
    setChosen((cur) => {
      const next = new Set(cur);
      if (on) next.add(id);
      else next.delete(id);
      return next;
    });
  }

  return (
    <form ref={form} class="card form token-form" aria-label="New API token" onSubmit={submit} noValidate>
      <h2>New token</h2>
      <ProblemBox problem={problem} fields={problemFields} />
      <Field label="Name" name="token-name" errors={errs.name} hint="What it is for, e.g. deploy web from CI.">
        <input id="token-name" value={name} maxLength={64} required autoComplete="off" aria-invalid={errs.name ? true : undefined}
          aria-describedby={errs.name ? "token-name-error" : "token-name-hint"} onInput={(e) => setName(e.currentTarget.value)} />
      </Field>
      <fieldset class="scopes" aria-describedby={errs.scopes ? "token-scopes-error" : props.admin ? undefined : "token-scopes-note"}>
        <legend>Scopes</legend>
        {!props.admin && (
          <p class="muted" id="token-scopes-note">
            A member's token can only read: the other scopes need an administrator.
          </p>
        )}
        <ul class="scope-list">
          {scopes.map((s) => {
            const id = "scope-" + s.id.replace(":", "-");
            return (
              <li key={s.id} class={allowed(s.id) ? "" : "muted"}>
                <input type="checkbox" id={id} checked={chosen.has(s.id)} disabled={!allowed(s.id)} aria-describedby={id + "-help"}
                  aria-invalid={errs.scopes ? true : undefined} onChange={(e) => toggle(s.id, e.currentTarget.checked)} />
                <label for={id}>
                  <code>{s.id}</code>
                </label>
                <small id={id + "-help"}>{s.help}</small>
              </li>
            );
          })}
        </ul>
        {errs.scopes && (
          <small class="field-error" id="token-scopes-error" role="alert">
            {errs.scopes.join("; ")}
          </small>
        )}
      </fieldset>
      <Resources targets={props.targets} names={props.names} chosen={resources} onChange={setResources} errors={errs.resources}
        itemErrors={itemErrors} />
      <Field label="Expires" name="token-expiry" errors={errs.expiry}
        hint={props.admin ? "Never is for a token you rotate yourself." : "Only an administrator may make a token that never expires."}>
        <select id="token-expiry" value={expiry} aria-invalid={errs.expiry ? true : undefined}
          aria-describedby={errs.expiry ? "token-expiry-error" : "token-expiry-hint"}
          onChange={(e) => setExpiry(e.currentTarget.value as Expiry)}>
          {expiries.filter((x) => props.admin || !x.adminOnly).map((x) => (
            <option key={x.id} value={x.id}>
              {x.label}
            </option>
          ))}
        </select>
      </Field>
      <div class="row">
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Making the token…" : "Make the token"}
        </button>
      </div>
    </form>
  );
}

// Resources picks what a token is narrowed to: a kind, then one of its
// kind from the lists this user reads (a tag is typed), added to the list
// below, each removable and with its own errors.
function Resources(props: {
  targets: Targets | null;
  names: Names;
  chosen: string[];
  onChange: (r: string[]) => void;
  errors?: string[];
  itemErrors: Record<string, string[]>;
}) {
  const [kind, setKind] = useState<ResourceKind>("app");
  const [value, setValue] = useState("");
  const t = props.targets;
  const options: { id: string; name: string }[] =
    kind === "app" ? t?.apps ?? [] : kind === "server" ? t?.servers ?? [] : kind === "db" ? t?.dbs ?? [] : [];
  const tags = useMemo(() => [...new Set((t?.servers ?? []).flatMap((s) => s.tags))].sort(), [t]);
  const kindLabel = resourceKinds.find((k) => k.id === kind)!.label;
  const next = value.trim() ? resource(kind, value) : "";

  function add() {
    if (!next || props.chosen.includes(next)) return;
    props.onChange([...props.chosen, next]);
    setValue("");
  }

  return (
    <fieldset class="resources" aria-describedby={props.errors ? "token-resources-error" : "token-resources-hint"}>
      <legend>Narrow to (optional)</legend>
      <small id="token-resources-hint" class="muted">
        Without any, the token acts on everything its scopes allow. A server includes what runs on it; a tag, every server that has it.
      </small>
      <div class="row wrap resource-pick">
        <div class="field">
          <label for="token-resource-kind">Kind</label>
          <select id="token-resource-kind" value={kind} onChange={(e) => {
            setKind(e.currentTarget.value as ResourceKind);
            setValue("");
          }}>
            {resourceKinds.map((k) => (
              <option key={k.id} value={k.id}>
                {k.label}
              </option>
            ))}
          </select>
        </div>
        {kind === "server-tag" ? (
          <div class="field">
            <label for="token-resource-value">{kindLabel}</label>
            <input id="token-resource-value" value={value} list="token-tags" autoComplete="off" placeholder="prod"
              onInput={(e) => setValue(e.currentTarget.value)}
              onKeyDown={(e) => {
                if (e.key === "Enter") {
                  e.preventDefault();
                  add();
                }
              }} />
            <datalist id="token-tags">
              {tags.map((g) => (
                <option key={g} value={g} />
              ))}
            </datalist>
          </div>
        ) : (
          <div class="field">
            <label for="token-resource-value">{kindLabel}</label>
            <select id="token-resource-value" value={value} onChange={(e) => setValue(e.currentTarget.value)}>
              <option value="">{!t ? "Loading…" : options.length ? "Choose…" : "None to choose"}</option>
              {options.map((o) => (
                <option key={o.id} value={o.id} disabled={props.chosen.includes(resource(kind, o.id))}>
                  {o.name}
                </option>
              ))}
            </select>
          </div>
        )}
        <button type="button" onClick={add} disabled={!next || props.chosen.includes(next)}>
          Add
        </button>
      </div>
      {props.chosen.length > 0 && (
        <ul class="chosen-resources" aria-label="Chosen resources">
          {props.chosen.map((r) => {
            const what = describeResource(r, props.names);
            const err = props.itemErrors[r];
            return (
              <li key={r} data-resource={r} class={err ? "invalid" : undefined}>
                <span>{what}</span>
                <button type="button" aria-label={"Remove " + what} onClick={() => props.onChange(props.chosen.filter((x) => x !== r))}>
                  Remove
                </button>
                {err && (
                  <small class="field-error" role="alert">
                    {err.join("; ")}
                  </small>
                )}
              </li>
            );
          })}
        </ul>
      )}
      {props.errors && (
        <small class="field-error" id="token-resources-error" role="alert">
          {props.errors.join("; ")}
        </small>
      )}
    </fieldset>
  );
}

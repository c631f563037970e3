import type { ComponentChildren, VNode } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import type { Problem } from "../lib/problem";
import { onLinkClick } from "../lib/router";

export function Link(props: { href: string; class?: string; children: ComponentChildren; "aria-current"?: "page"; "aria-label"?: string }) {
  return (
    <a href={props.href} class={props.class} aria-current={props["aria-current"]} aria-label={props["aria-label"]} onClick={onLinkClick}>
      {props.children}
    </a>
  );
}

// ProblemBox shows a problem's title and detail, and the field errors no
// field of the form shows itself.
export function ProblemBox({ problem, fields = [] }: { problem: Problem | null; fields?: string[] }) {
  if (!problem) return null;
  const known = new Set(fields);
  const rest = (problem.errors ?? []).filter((e) => !known.has(e.field.replace(/^body\./, "").replace(/[[.].*$/, "")));
  return (
    <div class="problem" role="alert">
      <strong>{problem.title}</strong>
      {problem.detail && <p>{problem.detail}</p>}
      {rest.length > 0 && (
        <ul>
          {rest.map((e) => (
            <li key={e.field}>
              <code>{e.field}</code>: {e.message}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

// Field is a labelled input with its errors next to it.
export function Field(props: {
  label: string;
  name: string;
  errors?: string[];
  hint?: string;
  children: ComponentChildren;
}) {
  const err = props.errors?.length ? props.errors.join("; ") : "";
  return (
    <div class={"field" + (err ? " invalid" : "")}>
      <label for={props.name}>{props.label}</label>
      {props.children}
      {props.hint && !err && <small id={props.name + "-hint"}>{props.hint}</small>}
      {err && (
        <small class="field-error" id={props.name + "-error"} role="alert">
          {err}
        </small>
      )}
    </div>
  );
}

// Confirm asks before a destructive action, naming the object it acts on.
export function Confirm(props: {
  title: string;
  object: string;
  action: string;
  onConfirm: () => void;
  onCancel: () => void;
  children?: ComponentChildren;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    ref.current?.showModal();
  }, []);
  return (
    <dialog ref={ref} class="confirm" aria-labelledby="confirm-title" onCancel={props.onCancel}>
      <h2 id="confirm-title">{props.title}</h2>
      <p>
        {props.action} <strong>{props.object}</strong>?
      </p>
      {props.children}
      <div class="row end">
        <button type="button" onClick={props.onCancel}>
          Keep it
        </button>
        <button type="button" class="danger" onClick={props.onConfirm}>
          {props.action} {props.object}
        </button>
      </div>
    </dialog>
  );
}

// A confirmation: what Confirm shows, and what confirming runs.
export interface Confirmation {
  title: string;
  object: string;
  action: string;
  run: () => unknown;
  children?: ComponentChildren;
}

// useConfirm keeps the action waiting for a confirmation: ask(what) opens
// the dialog that spec(what) describes; confirming closes it and runs the
// action, cancelling just closes it. Render dialog where it goes. spec is
// called when the dialog renders, so it may use what the component
// computes after calling useConfirm.
export function useConfirm<T>(spec: (what: T) => Confirmation): { ask: (what: T) => void; dialog: VNode | null } {
  const [asked, setAsked] = useState<{ what: T } | null>(null);
  const dialog = asked ? <Asked spec={() => spec(asked.what)} close={() => setAsked(null)} /> : null;
  return { ask: (what: T) => setAsked({ what }), dialog };
}

function Asked({ spec, close }: { spec: () => Confirmation; close: () => void }) {
  const c = spec();
  return (
    <Confirm title={c.title} object={c.object} action={c.action} onCancel={close}
      onConfirm={() => {
        close();
        void c.run();
      }}>
      {c.children}
    </Confirm>
  );
}

// Tabs switches between the sections of one page kept in its state (the
// sections at their own addresses use SubNav).
export function Tabs<T extends string>(props: { label: string; tabs: { id: T; label: string }[]; current: T; onSelect: (id: T) => void }) {
  return (
    <div class="tabs" role="tablist" aria-label={props.label}>
      {props.tabs.map((t) => (
        <button key={t.id} type="button" role="tab" aria-selected={props.current === t.id} onClick={() => props.onSelect(t.id)}>
          {t.label}
        </button>
      ))}
    </div>
  );
}

// Column is a table's column heading: its text, or its text with a class
// (num for figures), shown to screen readers only (an actions column), or
// with a note under it (a result column's type, say). A label may be
// computed markup; the key then names the column.
export type Column =
  | string
  | { label: ComponentChildren; key?: string | number; class?: string; hidden?: boolean; note?: ComponentChildren }
  | null
  | false;

// Table is a list's table: its headings (a falsy one is left out), its
// rows, and what to say when it has none (shown only when given).
export function Table(props: { label: string; columns: Column[]; children: ComponentChildren; empty?: ComponentChildren; class?: string }) {
  return (
    <>
      <table class={"plain" + (props.class ? " " + props.class : "")} aria-label={props.label}>
        <thead>
          <tr>
            {props.columns.map((c, i) => {
              if (!c) return null;
              const col = typeof c === "string" ? { label: c } : c;
              return (
                <th key={col.key ?? i} scope="col" class={col.class || undefined}>
                  {col.hidden ? <span class="sr-only">{col.label}</span> : col.label}
                  {col.note != null && <small class="col-note">{col.note}</small>}
                </th>
              );
            })}
          </tr>
        </thead>
        <tbody>{props.children}</tbody>
      </table>
      {props.empty && <p class="muted">{props.empty}</p>}
    </>
  );
}

export function StatusBadge({ status }: { status: string }) {
  return <span class={"badge s-" + status}>{status}</span>;
}

export function CopyButton({ text, label = "Copy" }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      onClick={async () => {
        await navigator.clipboard?.writeText(text).catch(() => {});
        setDone(true);
        setTimeout(() => setDone(false), 1500);
      }}
    >
      {done ? "Copied" : label}
    </button>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="muted" aria-live="polite">
      Loading {what}…
    </p>
  );
}

// SubNav links the pages of one area (monitoring's alerts and rules, say),
// marking the one shown.
export function SubNav(props: { label: string; items: { href: string; label: string; current: boolean }[] }) {
  return (
    <nav class="subnav" aria-label={props.label}>
      {props.items.map((i) => (
        <Link key={i.href} href={i.href} aria-current={i.current ? "page" : undefined}>
          {i.label}
        </Link>
      ))}
    </nav>
  );
}

// BackLink leads from a page back to the list (or the page) it belongs
// to: "← Jobs".
export function BackLink({ href, label }: { href: string; label: string }) {
  return (
    <p>
      <Link href={href}>{"← " + label}</Link>
    </p>
  );
}

// Option is one choice of a select: its value, and its text when that
// differs from the value.
export type Option = string | { value: string; label: string };

// FilterSelect is one filter of a list: a select whose label only screen
// readers read.
export function FilterSelect(props: { id: string; label: string; value: string; onChange: (value: string) => void; options: Option[] }) {
  return (
    <>
      <label class="sr-only" for={props.id}>
        {props.label}
      </label>
      <select id={props.id} value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
        {props.options.map((o) => {
          const { value, label } = typeof o === "string" ? { value: o, label: o } : o;
          return (
            <option key={value} value={value}>
              {label}
            </option>
          );
        })}
      </select>
    </>
  );
}

import type { ComponentChildren } from "preact";
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

// API tokens' own logic, kept pure for the unit tests: a token's state
// from its dates, what each scope allows, resources as words, the expiry
// choices as the API's fields, and the create form's errors by field.

import { fieldErrors, type Problem } from "./problem";

export type TokenState = "live" | "expired" | "revoked";

export interface TokenDates {
  expires_at?: string | null;
  revoked_at?: string | null;
}

// tokenState is what the API does with a token now: a revoked one is
// refused whatever its expiry, an expired one from its expiry on.
export function tokenState(t: TokenDates, now = Date.now()): TokenState {
  if (t.revoked_at) return "revoked";
  if (t.expires_at && Date.parse(t.expires_at) <= now) return "expired";
  return "live";
}

// The scopes, narrowest first, with what each allows beyond reading.
export const scopes: { id: string; help: string }[] = [
  { id: "read", help: "What a member reads: servers, applications, deployments, databases, jobs, alerts." },
  { id: "read:secrets", help: "Environment values, connection details, job output; every use is audited." },
  { id: "deploy", help: "Deploy, roll back and cancel deployments." },
  { id: "operate", help: "Server, service, container and database actions, backups, queries." },
  { id: "write", help: "Every change an administrator makes, except users, tokens and the recovery kit." },
  { id: "admin", help: "Everything a token may do." },
];

// memberScopes are the scopes a member's token may have.
export const memberScopes = ["read"];

// orderScopes sorts chosen scopes as the API lists them, narrowest first.
export function orderScopes(chosen: Iterable<string>): string[] {
  const order = scopes.map((s) => s.id);
  return [...new Set(chosen)].sort((a, b) => order.indexOf(a) - order.indexOf(b));
}

// The expiry choices of the create form; "never" is administrators' only.
export type Expiry = "30" | "90" | "365" | "never";

export const expiries: { id: Expiry; label: string; adminOnly?: boolean }[] = [
  { id: "30", label: "In 30 days" },
  { id: "90", label: "In 90 days" },
  { id: "365", label: "In 365 days" },
  { id: "never", label: "Never", adminOnly: true },
];

export const defaultExpiry: Expiry = "90";

// expiryBody is an expiry choice as the create call's fields.
export function expiryBody(e: Expiry): { expires_in_days?: number; never_expires?: boolean } {
  return e === "never" ? { never_expires: true } : { expires_in_days: Number(e) };
}

// Resource kinds a token may be narrowed to, as the API writes them.
export type ResourceKind = "app" | "server" | "db" | "server-tag";

export const resourceKinds: { id: ResourceKind; label: string }[] = [
  { id: "app", label: "Application" },
  { id: "server", label: "Server" },
  { id: "db", label: "Database instance" },
  { id: "server-tag", label: "Server tag" },
];

export function resource(kind: ResourceKind, value: string): string {
  return `${kind}:${value.trim()}`;
}

export function parseResource(r: string): { kind: string; value: string } {
  const i = r.indexOf(":");
  return i < 0 ? { kind: "", value: r } : { kind: r.slice(0, i), value: r.slice(i + 1) };
}

// Names the console knows for ids.
export type Names = Record<string, string | undefined>;

// describeResource writes a resource as words, with the name of what it
// names when known: "application shop", "servers tagged prod".
export function describeResource(r: string, names: Names = {}): string {
  const { kind, value } = parseResource(r);
  const name = names[value] || value;
  switch (kind) {
    case "app":
      return `application ${name}`;
    case "server":
      return `server ${name}`;
    case "db":
      return `database instance ${name}`;
    case "server-tag":
      return `servers tagged ${value}`;
    default:
      return r;
  }
}

// untilText says how long until a time, briefly: "in 12 min", "in 89 d".
export function untilText(at: string, now = Date.now()): string {
  const s = Math.max(0, Math.round((Date.parse(at) - now) / 1000));
  if (s < 60) return `in ${s} s`;
  if (s < 3600) return `in ${Math.floor(s / 60)} min`;
  if (s < 86400) return `in ${Math.floor(s / 3600)} h`;
  return `in ${Math.floor(s / 86400)} d`;
}

// The create form's fields, as its errors are shown.
export const formFields = ["name", "scopes", "resources", "expiry"] as const;

export interface FormErrors {
  name?: string[];
  scopes?: string[];
  expiry?: string[];
  // resources' errors: those of the list, and those of each chosen one
  // by its place in the list.
  resources?: string[];
  resource: Record<number, string[]>;
}

// formErrors maps a refusal of the create call to the form's fields:
// both expiry fields to the expiry, each resource's error to its item.
export function formErrors(p: Problem | null | undefined): FormErrors {
  const by = fieldErrors(p);
  const out: FormErrors = { resource: {} };
  if (by.name) out.name = by.name;
  if (by.scopes) out.scopes = by.scopes;
  const expiry = [...(by.expires_in_days ?? []), ...(by.never_expires ?? [])];
  if (expiry.length) out.expiry = expiry;
  for (const e of p?.errors ?? []) {
    const m = /^(?:body\.)?resources(?:\[(\d+)\])?/.exec(e.field);
    if (!m) continue;
    if (m[1] === undefined) (out.resources ??= []).push(e.message);
    else (out.resource[Number(m[1])] ??= []).push(e.message);
  }
  return out;
}

// problemFields are the API's field names the form shows itself (the
// rest the problem box lists).
export const problemFields = ["name", "scopes", "resources", "expires_in_days", "never_expires"];

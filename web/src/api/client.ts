import createClient from "openapi-fetch";
import type { components, paths } from "./schema";
import { accessToken, clearSession, currentUser, needsRefresh, refresh } from "../lib/auth";
import { ProblemError, asProblem } from "../lib/problem";

export type Schemas = components["schemas"];

let onSignInRequired: () => void = () => {};

// whenSignInRequired sets what happens when the session ended (a 401 the
// refresh cookie could not cure): the app goes to sign-in and remembers
// the page, to come back to it afterwards.
export function whenSignInRequired(fn: () => void) {
  onSignInRequired = fn;
}

// authedFetch sends the access token, renews it from the refresh cookie
// when it is about to expire or was refused, and retries once.
export async function authedFetch(input: Request): Promise<Response> {
  // The sign-in steps and the refresh carry no access token, and their 401
  // is an answer to show, not an ended session.
  const isAuth = /^\/api\/v1\/auth\/(login|2fa\/verify|refresh)$/.test(new URL(input.url, location.href).pathname);
  if (!isAuth && currentUser() && needsRefresh()) await refresh();
  const send = () => {
    const r = input.clone();
    const t = accessToken();
    if (t && !isAuth) r.headers.set("Authorization", `Bearer ${t}`);
    return fetch(r);
  };
  let res = await send();
  if (res.status === 401 && !isAuth) {
    if (await refresh()) res = await send();
    if (res.status === 401) {
      clearSession();
      onSignInRequired();
    }
  }
  return res;
}

export const api = createClient<paths>({ baseUrl: "", fetch: authedFetch, credentials: "same-origin" });

// ok unwraps an openapi-fetch result: the data, or a ProblemError.
export async function ok<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await p;
  if (error !== undefined || !response.ok) throw new ProblemError(asProblem(error, response.status));
  return data as T;
}

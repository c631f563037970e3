// The access token lives in this module's memory only: never in storage,
// so a script injected into another page or a copied profile cannot read
// it. A reload or a new tab renews it from the refresh cookie (HttpOnly,
// sent only to /api/v1/auth), silently.

export interface User {
  id: string;
  email: string;
  admin: boolean;
}

interface Session {
  token: string;
  user: User;
  expiresAt: number; // ms since epoch
}

let session: Session | null = null;
let refreshing: Promise<boolean> | null = null;
const listeners = new Set<() => void>();

export function currentUser(): User | null {
  return session?.user ?? null;
}

export function accessToken(): string | null {
  return session?.token ?? null;
}

export function onAuthChange(fn: () => void): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function changed() {
  for (const fn of listeners) fn();
}

interface TokenBody {
  access_token: string;
  expires_in: number;
  user: User;
}

export function setTokens(body: TokenBody, now = Date.now()) {
  session = { token: body.access_token, user: body.user, expiresAt: now + body.expires_in * 1000 };
  changed();
}

export function clearSession() {
  const had = session !== null;
  session = null;
  if (had) changed();
}

// needsRefresh reports whether the token expires within a minute.
export function needsRefresh(now = Date.now()): boolean {
  return session === null || session.expiresAt - now < 60_000;
}

// refresh exchanges the refresh cookie for a new access token. Concurrent
// callers share one request: the refresh token rotates on use, and a
// second use of the old one would end the session.
export function refresh(): Promise<boolean> {
  refreshing ??= (async () => {
    try {
      const r = await fetch("/api/v1/auth/refresh", { method: "POST", credentials: "same-origin" });
      if (!r.ok) {
        clearSession();
        return false;
      }
      setTokens((await r.json()) as TokenBody);
      return true;
    } catch {
      return false;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

// Paths of the console's routes, kept pure for the unit tests.

// Paths the git host sends the browser back to, after creating the app
// and after installing it (the control plane's githost.ManifestRedirectPath
// and githost.SetupPath).
export const manifestReturnPath = "/githost/manifest/callback";
export const setupReturnPath = "/githost/setup";

// match returns the parameters of a path against a pattern such as
// /servers/:id, or null.
export function match(pattern: string, path: string): Record<string, string> | null {
  const p = pattern.split("/").filter(Boolean);
  const s = path.split("/").filter(Boolean);
  if (p.length !== s.length) return null;
  const out: Record<string, string> = {};
  for (let i = 0; i < p.length; i++) {
    if (p[i].startsWith(":")) out[p[i].slice(1)] = decodeURIComponent(s[i]);
    else if (p[i] !== s[i]) return null;
  }
  return out;
}

// safeNext keeps a return path within the console: a path on this origin,
// never another host (//evil.example) nor the sign-in page itself.
export function safeNext(next: string | null): string {
  if (!next || !next.startsWith("/") || next.startsWith("//") || next.startsWith("/\\")) return "/";
  if (next.startsWith("/sign-in")) return "/";
  return next;
}

// alias maps the paths that notifications link to (in the inbox and in
// e-mails already sent) to the console's page for the object, and short
// addresses to their page, or returns null when path is no such link.
export function alias(path: string): string | null {
  let p: Record<string, string> | null;
  if (path === "/tokens") return "/platform/tokens";
  if ((p = match("/alerts/:id", path))) return "/monitoring?alert=" + encodeURIComponent(p.id);
  if ((p = match("/databases/:instance/backups/:run", path))) return "/backups/runs/" + encodeURIComponent(p.run);
  if ((p = match("/applications/:app/deployments/:deployment", path))) return "/deployments/" + encodeURIComponent(p.deployment);
  return null;
}

// tabPath is the address of a tab of the page at base: the first tab is
// the page itself (/servers/ID), the others a segment under it
// (/servers/ID/containers), so that a tab can be linked to and back and
// forward step through the tabs shown.
export function tabPath(base: string, tab: string, first: string): string {
  return !tab || tab === first ? base : base + "/" + encodeURIComponent(tab);
}

// tabOf is the tab an address names among the known ones, or the first.
export function tabOf<T extends string>(wanted: string | undefined, known: readonly T[]): T {
  return known.find((t) => t === wanted) ?? known[0];
}

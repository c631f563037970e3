import { useEffect, useState } from "preact/hooks";
import { tabPath } from "./paths";

export { alias, match, safeNext, tabOf, tabPath } from "./paths";

// A small history router: the console's routes are plain paths, so that
// links (the inbox's, a colleague's) open the page they name.

const listeners = new Set<() => void>();

export function navigate(to: string, replace = false) {
  if (to === location.pathname + location.search) return;
  if (replace) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  for (const fn of listeners) fn();
}

addEventListener("popstate", () => {
  for (const fn of listeners) fn();
});

export function useLocation(): { path: string; query: URLSearchParams } {
  const [, set] = useState(0);
  useEffect(() => {
    const fn = () => set((n) => n + 1);
    listeners.add(fn);
    return () => listeners.delete(fn);
  }, []);
  return { path: location.pathname, query: new URLSearchParams(location.search) };
}

// Link is an anchor that navigates without reloading.
export function onLinkClick(e: MouseEvent) {
  const a = (e.currentTarget as HTMLAnchorElement) ?? null;
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  navigate(a.getAttribute("href") ?? "/");
}

// selectTab returns what a page's tabs call to show a tab: it goes to
// the tab's address (lib/paths.ts tabPath), in the history.
export function selectTab(base: string, first: string): (tab: string) => void {
  return (tab) => navigate(tabPath(base, tab, first));
}

// Keyboard shortcuts of the console: one table, shown in the "?" help and
// read by the handler, so that the help never lists a key that does
// nothing.

export interface Shortcut {
  keys: string; // as shown: "/", "?", "g s"
  does: string;
  go?: string; // a path to go to
}

export const shortcuts: Shortcut[] = [
  { keys: "/", does: "Focus the search of the screen" },
  { keys: "?", does: "Show this help" },
  { keys: "Esc", does: "Leave the search, close a dialog" },
  { keys: "g s", does: "Go to servers", go: "/servers" },
  { keys: "g j", does: "Go to jobs", go: "/jobs" },
  { keys: "g i", does: "Go to the inbox", go: "/inbox" },
  { keys: "g n", does: "Go to notification channels", go: "/notifications" },
  { keys: "g a", does: "Go to the audit log", go: "/audit" },
  { keys: "g p", does: "Go to the platform", go: "/platform" },
];

export type KeyAction = { kind: "search" } | { kind: "help" } | { kind: "go"; path: string } | { kind: "prefix" } | null;

// typing reports whether a key goes to a field the user is typing in.
export function typing(tag: string, editable = false): boolean {
  return editable || tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT";
}

// keyAction decides what a key press does, given the key pressed before
// it (for two-key sequences such as "g s"). Keys with Ctrl, Alt or Meta,
// and keys typed into a field, do nothing.
export function keyAction(
  key: string,
  prev: string,
  mods: { ctrl?: boolean; alt?: boolean; meta?: boolean } = {},
  inField = false,
): KeyAction {
  if (inField || mods.ctrl || mods.alt || mods.meta) return null;
  if (prev === "g") {
    const s = shortcuts.find((x) => x.go && x.keys === "g " + key);
    return s ? { kind: "go", path: s.go! } : null;
  }
  if (key === "/") return { kind: "search" };
  if (key === "?") return { kind: "help" };
  if (key === "g") return { kind: "prefix" };
  return null;
}

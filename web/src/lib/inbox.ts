import { useEffect, useState } from "preact/hooks";
import { api, ok } from "../api/client";
import { stream } from "./stream";

// The unread count of the signed-in user's inbox, shown in the header on
// every screen: loaded once, again when the stream reports a new item or
// a gap, and set from the answer when items are marked read.

let unread: number | null = null;
const listeners = new Set<(n: number | null) => void>();

export function setUnread(n: number | null) {
  unread = n;
  for (const fn of listeners) fn(n);
}

export async function loadUnread() {
  try {
    const body = await ok(api.GET("/api/v1/notifications", { params: { query: { limit: 1 } } }));
    setUnread(body.unread_count);
  } catch {
    // The header keeps the last count; the inbox screen shows problems.
  }
}

stream.on("inbox", () => void loadUnread());
stream.on("reset", () => {
  if (listeners.size) void loadUnread();
});

export function useUnread(): number | null {
  const [n, set] = useState(unread);
  useEffect(() => {
    listeners.add(set);
    if (unread === null) void loadUnread();
    return () => void listeners.delete(set);
  }, []);
  return n;
}

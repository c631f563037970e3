import { useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { Link, Loading, ProblemBox } from "../components/ui";
import { setUnread } from "../lib/inbox";
import { useLive } from "../lib/live";
import { asProblem, type Problem } from "../lib/problem";
import { useResource } from "../lib/resource";
import "./admin.css";
import { useTitle } from "../lib/title";

type Item = Schemas["Notification"];

interface Page {
  items: Item[];
  unread: number;
  next: string | null;
}

const PAGE = 50;

// Inbox lists the signed-in user's notifications, newest first; a new
// item arrives live from the stream. Items are marked read one by one or
// all at once.
export function Inbox() {
  useTitle("Inbox");
  const res = useResource<Page>(async () => {
    const body = await ok(api.GET("/api/v1/notifications", { params: { query: { limit: PAGE } } }));
    setUnread(body.unread_count);
    return { items: body.notifications ?? [], unread: body.unread_count, next: body.next_cursor ?? null };
  });
  const { data: page, set } = res;
  const [actionProblem, setProblem] = useState<Problem | null>(null);
  const [busy, setBusy] = useState(false);
  const problem = actionProblem ?? res.problem;

  // A new item: load the first page again (older pages stay as loaded).
  useLive(["inbox"], () => {
    void (async () => {
      try {
        const body = await ok(api.GET("/api/v1/notifications", { params: { query: { limit: PAGE } } }));
        setUnread(body.unread_count);
        set((cur) => {
          const fresh = body.notifications ?? [];
          if (!cur) return { items: fresh, unread: body.unread_count, next: body.next_cursor ?? null };
          const seen = new Set(fresh.map((i) => i.id));
          return { items: [...fresh, ...cur.items.filter((i) => !seen.has(i.id))], unread: body.unread_count, next: cur.next };
        });
      } catch (err) {
        setProblem(asProblem(err));
      }
    })();
  });

  async function older() {
    if (!page?.next) return;
    setBusy(true);
    try {
      const body = await ok(api.GET("/api/v1/notifications", { params: { query: { limit: PAGE, before: page.next } } }));
      set((cur) => (cur ? { items: [...cur.items, ...(body.notifications ?? [])], unread: body.unread_count, next: body.next_cursor ?? null } : cur));
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setBusy(false);
    }
  }

  async function markRead(body: { ids: string[] } | { all: true }) {
    setProblem(null);
    try {
      const r = await ok(api.POST("/api/v1/notifications/read", { body }));
      setUnread(r.unread_count);
      const ids = "ids" in body ? new Set(body.ids) : null;
      const now = new Date().toISOString();
      set((cur) =>
        cur
          ? {
              ...cur,
              unread: r.unread_count,
              items: cur.items.map((i) => (!i.read && (!ids || ids.has(i.id)) ? { ...i, read: true, read_at: now } : i)),
            }
          : cur,
      );
    } catch (err) {
      setProblem(asProblem(err));
    }
  }

  return (
    <section class="admin">
      <div class="row between wrap">
        <h1>Inbox</h1>
        <div class="row wrap">
          <Link href="/notifications">Notification settings</Link>
          <button type="button" disabled={!page?.unread} onClick={() => void markRead({ all: true })}>
            Mark all read
          </button>
        </div>
      </div>
      <ProblemBox problem={problem} />
      {!page && !problem && <Loading what="the inbox" />}
      {page && (
        <>
          <p class="muted" aria-live="polite">
            {page.unread === 0 ? "Nothing unread." : `${page.unread} unread`}
          </p>
          {page.items.length === 0 ? (
            <p class="empty card">
              No notifications yet. Deployments, alerts, servers going offline and failed backups show up here as they happen.
            </p>
          ) : (
            <ul class="inbox" aria-label="Notifications">
              {page.items.map((i) => (
                <li key={i.id} class={"card inbox-item" + (i.read ? "" : " unread")} data-item={i.id}>
                  <div class="row between wrap">
                    <strong>
                      {!i.read && <span class="sr-only">Unread: </span>}
                      {i.link ? <Link href={i.link}>{i.title}</Link> : i.title}
                    </strong>
                    <time class="muted" dateTime={i.created_at} title={new Date(i.created_at).toLocaleString()}>
                      {new Date(i.created_at).toLocaleString()}
                    </time>
                  </div>
                  {i.body && <p class="inbox-body">{i.body}</p>}
                  <div class="row between wrap">
                    <code class="muted">{i.event_type}</code>
                    {i.read ? (
                      <span class="muted">Read</span>
                    ) : (
                      <button type="button" onClick={() => void markRead({ ids: [i.id] })}>
                        Mark read<span class="sr-only">: {i.title}</span>
                      </button>
                    )}
                  </div>
                </li>
              ))}
            </ul>
          )}
          {page.next && (
            <button type="button" disabled={busy} onClick={() => void older()}>
              Older notifications
            </button>
          )}
        </>
      )}
    </section>
  );
}

import { useEffect, useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { api, ok } from "../api/client";
import { Link, ProblemBox, StatusBadge } from "../components/ui";
import { currentUser } from "../lib/auth";
import { counts, fromColumns, queryFromURL, queryToURL, tagsOf, view, type FleetQuery, type FleetServer, type SortKey } from "../lib/fleet";
import { percent } from "../lib/format";
import { navigate } from "../lib/router";
import { serverStatusAfter, useLive } from "../lib/live";
import { useResource } from "../lib/resource";
import { visibleRange } from "../lib/virtual";
import { Batches, sparkPoints } from "../lib/spark";
import { Ago } from "../components/Ago";
import { useTitle } from "../lib/title";

type Server = FleetServer;

const ROW = 44;

const columns: { key: SortKey; label: string; class: string }[] = [
  { key: "name", label: "Name", class: "c-name" },
  { key: "status", label: "Status", class: "c-status" },
  { key: "cpu", label: "CPU", class: "c-num" },
  { key: "memory", label: "Memory", class: "c-num" },
  { key: "disk", label: "Disk", class: "c-num" },
  { key: "last_seen", label: "Last seen", class: "c-seen" },
];

// loadFleet fetches every server with its newest sample, in one request
// of the compact, column-wise list.
export async function loadFleet(): Promise<Server[]> {
  return fromColumns(await ok(api.GET("/api/v1/servers/compact")));
}

export function Fleet() {
  useTitle("Servers");
  const res = useResource(() => {
    performance.mark("capstan:fleet-start");
    return loadFleet();
  });
  const { data: servers, problem, set: setServers } = res;
  const [q, setQ] = useState<FleetQuery>(() => queryFromURL(new URLSearchParams(location.search)));
  const search = useRef<HTMLInputElement>(null);

  // Servers enrolling, going offline, coming back: patch the row in place
  // (a reload of 10,000 servers per change would be wasteful); reload all
  // after a gap in the stream.
  useLive(["event"], (data, type) => {
    if (type === "reset") {
      void res.reload();
      return;
    }
    const status = serverStatusAfter(data?.type);
    const id = data?.subject?.id as string | undefined;
    if (!status || !id) return;
    setServers((list) => {
      if (!list) return list;
      const i = list.findIndex((s) => s.id === id);
      if (i < 0) {
        void res.reload(); // a server this list has not seen yet
        return list;
      }
      const next = list.slice();
      const seen = data.payload?.last_seen_at ? Date.parse(data.payload.last_seen_at) : list[i].last_seen;
      next[i] = { ...list[i], status, last_seen: seen };
      return next;
    });
  });

  function update(next: Partial<FleetQuery>) {
    const nq = { ...q, ...next };
    setQ(nq);
    navigate(location.pathname + queryToURL(nq), true);
  }

  const rows = useMemo(() => (servers ? view(servers, q) : []), [servers, q]);
  const tags = useMemo(() => (servers ? tagsOf(servers) : []), [servers]);
  const n = useMemo(() => (servers ? counts(servers) : null), [servers]);

  return (
    <section class="fleet">
      <div class="row between wrap">
        <h1>Servers</h1>
        {currentUser()?.admin && (
          <Link href="/servers/new" class="button primary">
            Enroll a server
          </Link>
        )}
      </div>
      <ProblemBox problem={problem} />
      {n && (
        <p class="counts" aria-live="polite">
          <span>{servers!.length} {servers!.length === 1 ? "server" : "servers"}</span>
          <span class="s-online">{n.online} online</span>
          <span class="s-offline">{n.offline} offline</span>
          <span class="s-pending">{n.pending} pending</span>
          {n.revoked > 0 && <span class="s-revoked">{n.revoked} revoked</span>}
        </p>
      )}
      <div class="filters" role="search">
        <label class="grow">
          <span class="sr-only">Search servers</span>
          <input ref={search} type="search" data-search placeholder="Search name, host, tag: (press /)" value={q.search}
            onInput={(e) => update({ search: (e.target as HTMLInputElement).value })} />
        </label>
        <label>
          <span class="sr-only">Status</span>
          <select value={q.status} onChange={(e) => update({ status: (e.target as HTMLSelectElement).value })}>
            <option value="">Any status</option>
            <option value="online">Online</option>
            <option value="offline">Offline</option>
            <option value="pending">Pending</option>
            <option value="revoked">Revoked</option>
          </select>
        </label>
        <label>
          <span class="sr-only">Tag</span>
          <select value={q.tag} onChange={(e) => update({ tag: (e.target as HTMLSelectElement).value })}>
            <option value="">Any tag</option>
            {tags.map((t) => (
              <option key={t} value={t}>
                {t}
              </option>
            ))}
          </select>
        </label>
      </div>
      {servers === null && !problem && <p class="muted">Loading servers…</p>}
      {servers && (
        <FleetTable rows={rows} q={q} onSort={(k) => update({ sort: k, desc: q.sort === k ? !q.desc : false })} />
      )}
      {servers && servers.length === 0 && (
        <p class="empty">
          No servers yet. {currentUser()?.admin ? <Link href="/servers/new">Enroll the first one.</Link> : "An administrator enrolls them."}
        </p>
      )}
    </section>
  );
}

interface Spark {
  cpu: (number | null)[];
  memory: (number | null)[];
}

// The most rows one sparkline request asks for (the API's limit).
const SPARK_BATCH = 100;

function FleetTable({ rows, q, onSort }: { rows: Server[]; q: FleetQuery; onSort: (k: SortKey) => void }) {
  const box = useRef<HTMLDivElement>(null);
  const [scroll, setScroll] = useState(0);
  const [height, setHeight] = useState(600);
  const marked = useRef(false);
  const [, setSparkVersion] = useState(0);
  // The last hour of the rows in view, fetched once scrolling settles, in
  // one small request per screenful: never for 10,000 servers at once.
  const sparks = useMemo(
    () =>
      new Batches<Spark>(
        SPARK_BATCH,
        async (ids) => {
          const d = await ok(api.GET("/api/v1/servers/sparklines", { params: { query: { ids: ids.join(",") } } }));
          return new Map((d.servers ?? []).map((s) => [s.server_id, { cpu: s.cpu ?? [], memory: s.memory ?? [] }]));
        },
        () => setSparkVersion((v) => v + 1),
      ),
    [],
  );

  useLayoutEffect(() => {
    const el = box.current!;
    const ro = new ResizeObserver(() => setHeight(el.clientHeight));
    ro.observe(el);
    setHeight(el.clientHeight);
    return () => ro.disconnect();
  }, []);

  useEffect(() => {
    if (!marked.current) {
      marked.current = true;
      performance.mark("capstan:fleet-rendered");
      performance.measure("capstan:fleet-first-render", "capstan:fleet-start", "capstan:fleet-rendered");
    }
  });

  const { start, end } = visibleRange(rows.length, ROW, scroll, height, 0);
  useEffect(() => {
    const t = setTimeout(() => sparks.want(rows.slice(start, end).filter((s) => s.cpu != null).map((s) => s.id)), 250);
    return () => clearTimeout(t);
  }, [start, end, rows]);
  return (
    <div class="table" role="table" aria-label="Servers" aria-rowcount={rows.length + 1}>
      <div class="thead" role="rowgroup">
        <div class="tr" role="row" aria-rowindex={1}>
          {columns.map((c) => (
            <div key={c.key} role="columnheader" class={c.class}
              aria-sort={q.sort === c.key ? (q.desc ? "descending" : "ascending") : "none"}>
              <button type="button" class="sort" onClick={() => onSort(c.key)}>
                {c.label}
                <span aria-hidden="true">{q.sort === c.key ? (q.desc ? " ↓" : " ↑") : ""}</span>
              </button>
            </div>
          ))}
        </div>
      </div>
      <div class="tbody" role="rowgroup" ref={box} onScroll={(e) => setScroll((e.target as HTMLDivElement).scrollTop)}>
        <div class="spacer" style={{ height: `${rows.length * ROW}px` }}>
          {rows.slice(Math.max(0, start - 8), Math.min(rows.length, end + 8)).map((s, j) => {
            const i = j + Math.max(0, start - 8) - start;
            return (
              <div key={s.id} class="tr" role="row" aria-rowindex={start + i + 2} style={{ transform: `translateY(${(start + i) * ROW}px)` }}>
                <div role="cell" class="c-name">
                  <Link href={"/servers/" + s.id}>{s.name}</Link>
                  {s.tags.slice(0, 3).map((t) => (
                    <span key={t} class="tag">
                      {t}
                    </span>
                  ))}
                </div>
                <div role="cell" class="c-status">
                  <StatusBadge status={s.status} />
                </div>
                <div role="cell" class="c-num">
                  <Meter label="CPU" value={s.cpu} spark={sparks.done.get(s.id)?.cpu} />
                </div>
                <div role="cell" class="c-num">
                  <Meter label="Memory" value={s.memory} spark={sparks.done.get(s.id)?.memory} />
                </div>
                <div role="cell" class="c-num">
                  <Meter label="Disk" value={s.disk} />
                </div>
                <div role="cell" class="c-seen">
                  <Ago at={s.last_seen} />
                </div>
              </div>
            );
          })}
        </div>
      </div>
      {rows.length === 0 && <p class="muted pad">No server matches.</p>}
    </div>
  );
}

function Meter({ label, value, spark }: { label: string; value: number | null | undefined; spark?: (number | null)[] }) {
  if (value == null) return <span class="muted">–</span>;
  const level = value >= 90 ? "hot" : value >= 75 ? "warm" : "ok";
  const points = spark ? sparkPoints(spark, 56, 18) : "";
  return (
    <span class="meter" title={`${label} ${percent(value)}`}>
      {points ? (
        <svg class={"spark " + level} width="56" height="18" viewBox="0 0 56 18" aria-hidden="true">
          <polyline points={points} fill="none" />
        </svg>
      ) : (
        <span class={"bar " + level}>
          <span style={{ width: `${Math.min(100, Math.max(0, value))}%` }} />
        </span>
      )}
      {percent(value)}
    </span>
  );
}

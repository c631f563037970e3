import { describe, expect, it } from "vitest";
import { counts, defaultQuery, fromColumns, matches, queryFromURL, queryToURL, tagsOf, view, type FleetServer } from "./fleet";

function srv(name: string, status: string, tags: string[] = [], cpu?: number, seen?: string): FleetServer {
  return {
    id: "srv_" + name,
    name,
    status,
    tags,
    last_seen: seen ? Date.parse(seen) : null,
    hostname: name + ".example.internal",
    os: "debian 12",
    cpu: cpu ?? null,
    memory: null,
    disk: null,
  };
}

const fleet = [
  srv("web-2", "online", ["web", "eu"], 40, "2026-01-01T00:00:10Z"),
  srv("db-1", "offline", ["db"], 95, "2026-01-01T00:00:05Z"),
  srv("web-1", "online", ["web"], 40, "2026-01-01T00:00:20Z"),
  srv("new", "pending"),
];

describe("compact list", () => {
  it("turns columns into servers, seconds into milliseconds", () => {
    const list = fromColumns({
      count: 2,
      id: ["srv_a", "srv_b"],
      name: ["a", "b"],
      status: ["online", "pending"],
      tags: [["web"], null],
      hostname: ["a.example", ""],
      os: ["debian 12", ""],
      last_seen: [1_700_000_000, null],
      cpu: [12.5, null],
      memory: [40, null],
      disk: [70.1, null],
    });
    expect(list[0]).toMatchObject({ id: "srv_a", tags: ["web"], last_seen: 1_700_000_000_000, cpu: 12.5, disk: 70.1 });
    expect(list[1]).toMatchObject({ id: "srv_b", tags: [], last_seen: null, cpu: null });
    expect(matches(list[0], "A.EXAMPLE debian")).toBe(true);
    expect(matches(list[1], "web")).toBe(false);
  });
});

describe("fleet view", () => {
  it("sorts by name by default and keeps name order for ties", () => {
    expect(view(fleet, defaultQuery).map((s) => s.name)).toEqual(["db-1", "new", "web-1", "web-2"]);
    expect(view(fleet, { ...defaultQuery, sort: "cpu", desc: true }).map((s) => s.name)).toEqual(["db-1", "web-1", "web-2", "new"]);
  });
  it("puts offline servers first when sorting by status", () => {
    expect(view(fleet, { ...defaultQuery, sort: "status" }).map((s) => s.status)).toEqual(["offline", "pending", "online", "online"]);
  });
  it("sorts by last seen, never-seen servers first ascending", () => {
    expect(view(fleet, { ...defaultQuery, sort: "last_seen" }).map((s) => s.name)).toEqual(["new", "db-1", "web-2", "web-1"]);
  });
  it("filters by status and tag together", () => {
    expect(view(fleet, { ...defaultQuery, status: "online", tag: "eu" }).map((s) => s.name)).toEqual(["web-2"]);
  });
  it("searches every word in name, host and tags, with tag: and status: words", () => {
    expect(matches(fleet[0], "WEB eu")).toBe(true);
    expect(matches(fleet[0], "web db")).toBe(false);
    expect(matches(fleet[1], "example.internal")).toBe(true);
    expect(matches(fleet[0], "tag:eu")).toBe(true);
    expect(matches(fleet[2], "tag:eu")).toBe(false);
    expect(matches(fleet[1], "status:offline")).toBe(true);
  });
  it("lists tags and counts statuses", () => {
    expect(tagsOf(fleet)).toEqual(["db", "eu", "web"]);
    expect(counts(fleet)).toEqual({ online: 2, offline: 1, pending: 1, revoked: 0 });
  });
  it("round-trips its query through the address", () => {
    const q = { search: "web", status: "online", tag: "eu", sort: "cpu" as const, desc: true };
    expect(queryFromURL(new URLSearchParams(queryToURL(q).slice(1)))).toEqual(q);
    expect(queryToURL(defaultQuery)).toBe("");
    expect(queryFromURL(new URLSearchParams("sort=evil")).sort).toBe("name");
  });
  it("selects and sorts 10,000 servers", () => {
    const big: FleetServer[] = [];
    for (let i = 0; i < 10_000; i++) big.push(srv("host-" + i, i % 10 === 0 ? "offline" : "online", ["t" + (i % 7)], i % 100));
    const out = view(big, { ...defaultQuery, search: "host-9", sort: "cpu", desc: true });
    expect(out.length).toBe(1111);
    expect(out[0].cpu).toBe(99);
  });
});

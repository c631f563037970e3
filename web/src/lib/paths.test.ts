import { describe, expect, it } from "vitest";
import { alias, match, safeNext, tabOf, tabPath } from "./paths";

describe("paths", () => {
  it("matches route patterns", () => {
    expect(match("/servers/:id", "/servers/srv_1")).toEqual({ id: "srv_1" });
    expect(match("/servers/:id", "/servers")).toBeNull();
    expect(match("/jobs/:id", "/servers/x")).toBeNull();
  });
  it("returns only to pages of the console after sign-in", () => {
    expect(safeNext("/servers/srv_1?tab=logs")).toBe("/servers/srv_1?tab=logs");
    expect(safeNext("//evil.example/")).toBe("/");
    expect(safeNext("/\\evil.example")).toBe("/");
    expect(safeNext("https://evil.example/")).toBe("/");
    expect(safeNext("/sign-in?next=/x")).toBe("/");
    expect(safeNext(null)).toBe("/");
  });
  it("sends the links of notifications to the object's page", () => {
    expect(alias("/alerts/alr_1")).toBe("/monitoring?alert=alr_1");
    expect(alias("/databases/dbi_1/backups/bkr_2")).toBe("/backups/runs/bkr_2");
    expect(alias("/applications/app_1/deployments/dep_2")).toBe("/deployments/dep_2");
    expect(alias("/applications/app_1/deployments")).toBeNull();
    expect(alias("/databases/dbi_1")).toBeNull();
    expect(alias("/servers/srv_1")).toBeNull();
  });
  it("sends short addresses to their page", () => {
    expect(alias("/tokens")).toBe("/platform/tokens");
    expect(alias("/platform/tokens")).toBeNull();
  });
  it("gives each tab of a page its own address", () => {
    expect(tabPath("/servers/srv_1", "containers", "overview")).toBe("/servers/srv_1/containers");
    expect(tabPath("/servers/srv_1", "overview", "overview")).toBe("/servers/srv_1");
    expect(tabPath("/databases/dbi_1", "", "overview")).toBe("/databases/dbi_1");
    expect(match("/servers/:id/:tab", "/servers/srv_1/containers")).toEqual({ id: "srv_1", tab: "containers" });
  });
  it("reads the tab from the address, the first one when unknown", () => {
    const tabs = ["overview", "services", "containers"] as const;
    expect(tabOf("containers", tabs)).toBe("containers");
    expect(tabOf(undefined, tabs)).toBe("overview");
    expect(tabOf("logs", tabs)).toBe("overview");
  });
});

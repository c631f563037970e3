import { describe, expect, it } from "vitest";
import { match, safeNext } from "./paths";

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
});

import { describe, expect, it } from "vitest";
import { eventLines } from "./events";

describe("eventLines", () => {
  it("returns the log lines a failed release's event carries", () => {
    const data = { lines: ["stdout: version v3 listening on :9090", "stderr: ready"] };
    expect(eventLines(data)).toEqual(["stdout: version v3 listening on :9090", "stderr: ready"]);
  });
  it("returns nothing for events without lines", () => {
    expect(eventLines(undefined)).toEqual([]);
    expect(eventLines(null)).toEqual([]);
    expect(eventLines({ port: 8080 })).toEqual([]);
    expect(eventLines({ lines: "not a list" })).toEqual([]);
  });
  it("keeps only the strings of a mixed list", () => {
    expect(eventLines({ lines: ["a", 1, null, "b"] })).toEqual(["a", "b"]);
  });
});

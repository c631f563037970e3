import { describe, expect, it } from "vitest";
import { attempt } from "./action";
import type { Problem } from "./problem";

describe("attempt", () => {
  it("is busy while the action runs and clears the last problem first", async () => {
    const seen: string[] = [];
    await attempt(
      async () => seen.push("run"),
      (b) => seen.push("busy " + b),
      (p) => seen.push("problem " + (p ? p.title : "none")),
    );
    expect(seen).toEqual(["busy true", "problem none", "run", "busy false"]);
  });

  it("shows a failed action's error as a problem", async () => {
    let problem: Problem | null = null;
    let busy = true;
    await attempt(
      async () => {
        throw { title: "Invalid", status: 422, detail: "check the form", errors: [{ field: "name", message: "required" }] };
      },
      (b) => (busy = b),
      (p) => (problem = p),
    );
    expect(busy).toBe(false);
    expect(problem!.status).toBe(422);
    expect(problem!.errors).toEqual([{ field: "name", message: "required" }]);
  });
});

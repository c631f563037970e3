import { describe, expect, it } from "vitest";
import { ProblemError, asProblem, fieldErrors, unfielded } from "./problem";

describe("problems", () => {
  const p = {
    title: "Unprocessable Entity",
    status: 422,
    detail: "validation failed",
    errors: [
      { field: "body.name", message: "is taken" },
      { field: "tags[1]", message: "too long" },
      { field: "body.payload.unit", message: "required" },
      { field: "other", message: "x" },
    ],
  };
  it("maps field errors to the form's fields", () => {
    expect(fieldErrors(p)).toEqual({ name: ["is taken"], tags: ["too long"], payload: ["required"], other: ["x"] });
    expect(unfielded(p, ["name", "tags", "payload"])).toEqual([{ field: "other", message: "x" }]);
  });
  it("takes problems from bodies, ProblemErrors and plain errors", () => {
    expect(asProblem(p).detail).toBe("validation failed");
    expect(asProblem(new ProblemError(p)).status).toBe(422);
    expect(asProblem(new Error("network down"), 0)).toEqual({ title: "Request failed", status: 0, detail: "network down" });
  });
});

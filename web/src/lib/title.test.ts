import { describe, expect, it } from "vitest";
import { titleOf } from "./title";

describe("titles", () => {
  it("names the page, then its section, then the product", () => {
    expect(titleOf("web-1", "Servers")).toBe("web-1 · Servers · Capstan");
    expect(titleOf("Jobs")).toBe("Jobs · Capstan");
    expect(titleOf()).toBe("Capstan");
  });
  it("leaves out what is not loaded yet", () => {
    expect(titleOf(undefined, "Servers")).toBe("Servers · Capstan");
    expect(titleOf(null, "", "Databases")).toBe("Databases · Capstan");
  });
  it("adds a tab after the name", () => {
    expect(titleOf("Containers", "web-1", "Servers")).toBe("Containers · web-1 · Servers · Capstan");
  });
});

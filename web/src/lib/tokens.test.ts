import { describe, expect, it } from "vitest";
import { describeResource, expiryBody, formErrors, orderScopes, parseResource, resource, tokenState, untilText } from "./tokens";

const now = Date.parse("2026-03-01T12:00:00Z");

describe("API tokens", () => {
  it("tells live, expired and revoked tokens apart", () => {
    expect(tokenState({ expires_at: "2026-05-30T12:00:00Z" }, now)).toBe("live");
    // No expiry: live until revoked.
    expect(tokenState({}, now)).toBe("live");
    expect(tokenState({ expires_at: null, revoked_at: null }, now)).toBe("live");
    expect(tokenState({ expires_at: "2026-03-01T11:59:59Z" }, now)).toBe("expired");
    // The instant of expiry is already past it.
    expect(tokenState({ expires_at: "2026-03-01T12:00:00Z" }, now)).toBe("expired");
    // Revoked wins over expired and over live.
    expect(tokenState({ expires_at: "2026-02-01T00:00:00Z", revoked_at: "2026-01-15T00:00:00Z" }, now)).toBe("revoked");
    expect(tokenState({ revoked_at: "2026-03-01T11:00:00Z" }, now)).toBe("revoked");
  });

  it("writes the expiry choices as the API's fields", () => {
    expect(expiryBody("30")).toEqual({ expires_in_days: 30 });
    expect(expiryBody("90")).toEqual({ expires_in_days: 90 });
    expect(expiryBody("365")).toEqual({ expires_in_days: 365 });
    expect(expiryBody("never")).toEqual({ never_expires: true });
  });

  it("orders scopes as the API does, once each", () => {
    expect(orderScopes(["admin", "deploy", "read", "deploy"])).toEqual(["read", "deploy", "admin"]);
    expect(orderScopes(new Set(["operate", "read:secrets"]))).toEqual(["read:secrets", "operate"]);
  });

  it("writes resources as words, with the names it knows", () => {
    const names = { app_1: "shop", srv_1: "web-1", dbi_1: "main" };
    expect(describeResource("app:app_1", names)).toBe("application shop");
    expect(describeResource("server:srv_1", names)).toBe("server web-1");
    expect(describeResource("db:dbi_1", names)).toBe("database instance main");
    expect(describeResource("server-tag:prod", names)).toBe("servers tagged prod");
    // Unknown ids stay ids; an unknown kind stays as written.
    expect(describeResource("app:app_9", names)).toBe("application app_9");
    expect(describeResource("thing:x")).toBe("thing:x");
    expect(resource("server-tag", " prod ")).toBe("server-tag:prod");
    expect(parseResource("server-tag:eu:west")).toEqual({ kind: "server-tag", value: "eu:west" });
  });

  it("says how long until a token expires", () => {
    expect(untilText("2026-03-01T12:00:30Z", now)).toBe("in 30 s");
    expect(untilText("2026-03-01T12:45:00Z", now)).toBe("in 45 min");
    expect(untilText("2026-03-01T20:00:00Z", now)).toBe("in 8 h");
    expect(untilText("2026-05-30T12:00:00Z", now)).toBe("in 90 d");
  });

  it("shows the create call's refusals next to the form's fields", () => {
    const e = formErrors({
      title: "Unprocessable Entity", status: 422, detail: "validation failed",
      errors: [
        { field: "body.name", message: "The name is 1 to 64 letters" },
        { field: "body.scopes[1]", message: "A member's token can only read" },
        { field: "body.resources[2]", message: "app:app_x names nothing that exists." },
        { field: "body.resources", message: "At most 100 resources." },
        { field: "body.never_expires", message: "Only an administrator may make a token that never expires." },
        { field: "body.expires_in_days", message: "A token expires after 1 to 365 days." },
      ],
    });
    expect(e.name).toEqual(["The name is 1 to 64 letters"]);
    expect(e.scopes).toEqual(["A member's token can only read"]);
    expect(e.resource).toEqual({ 2: ["app:app_x names nothing that exists."] });
    expect(e.resources).toEqual(["At most 100 resources."]);
    expect(e.expiry).toEqual(["A token expires after 1 to 365 days.", "Only an administrator may make a token that never expires."]);
    expect(formErrors(null)).toEqual({ resource: {} });
  });
});

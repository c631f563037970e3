import { describe, expect, it } from "vitest";
import { accessToken, clearSession, currentUser, needsRefresh, onAuthChange, setTokens } from "./auth";

describe("auth", () => {
  it("keeps the token in memory and asks for a refresh in its last minute", () => {
    let changes = 0;
    const off = onAuthChange(() => changes++);
    setTokens({ access_token: "at_x", expires_in: 900, user: { id: "usr_1", email: "a@example.com", admin: true } }, 1_000_000);
    expect(accessToken()).toBe("at_x");
    expect(currentUser()?.email).toBe("a@example.com");
    expect(needsRefresh(1_000_000 + 800_000)).toBe(false);
    expect(needsRefresh(1_000_000 + 850_000)).toBe(true);
    clearSession();
    expect(accessToken()).toBeNull();
    expect(needsRefresh()).toBe(true);
    expect(changes).toBe(2);
    off();
  });
});

import { api } from "../api/client";
import { clearSession } from "../lib/auth";
import { navigate } from "../lib/router";

export async function signOut() {
  await api.POST("/api/v1/auth/logout").catch(() => undefined);
  clearSession();
  navigate("/sign-in", true);
}

// The browser test of API tokens, run by the Go test TestConsoleTokens
// (e2e/console_tokens_test.go): the administrator finds the screen from
// the platform page, has an empty name refused next to its field, makes a
// token with scope deploy narrowed to the application CAPSTAN_APP_NAME
// (CAPSTAN_APP_ID), expiring in 30 days, and sees its secret once (it
// goes to the file CAPSTAN_SECRET_FILE for the Go test, never to the
// log); the list shows it live, and its last use (the Go test's call with
// it) once made; revoking it asks first, then the list shows it revoked;
// the audit log says all of it in sentences. Then a member, in a browser
// of their own, is offered only read and no token that never expires,
// makes a read token and sees only their own.
//
// axe-core runs on every screen and state; screenshots go to
// web/test-results/. Lines on stdout report to the Go test.
import { writeFileSync } from "node:fs";
import { axe, env, expectTitle, say, session, shots, signIn, wait, watchPage } from "./lib.mjs";

const e = process.env;
const appName = e.CAPSTAN_APP_NAME;
const appID = e.CAPSTAN_APP_ID;
const name = "deploy web from CI";
const member = { email: e.CAPSTAN_MEMBER_EMAIL, password: e.CAPSTAN_MEMBER_PASSWORD, secret: e.CAPSTAN_MEMBER_TOTP_SECRET };

// refreshUntil clicks the list's Refresh until check passes, each time
// after the list's answer came, for up to 90 s.
async function refreshUntil(page, what, check) {
  const deadline = Date.now() + wait.timeout;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error("gave up waiting for " + what);
    const answered = page.waitForResponse((r) => new URL(r.url()).pathname === "/api/v1/tokens" && r.request().method() === "GET", wait);
    await page.getByRole("button", { name: "Refresh", exact: true }).click();
    await answered;
    await page.getByRole("button", { name: "Refresh", exact: true }).and(page.locator(":enabled")).waitFor(wait);
  }
}

await session(async (page) => {
  // Found from the platform page.
  await page.getByRole("heading", { name: "Platform", exact: true }).waitFor(wait);
  await page.getByRole("link", { name: "Manage API tokens" }).click();
  await page.getByRole("heading", { name: "API tokens", level: 1 }).waitFor(wait);
  await expectTitle(page, "API tokens · Platform · Capstan");
  const form = page.getByRole("form", { name: "New API token" });
  await form.waitFor(wait);
  await page.getByText("No tokens yet.").waitFor(wait);
  await axe(page, "tokens-empty");

  // An empty name: the API's refusal, next to the field.
  await form.getByRole("button", { name: "Make the token" }).click();
  await page.locator("#token-name-error").waitFor(wait);
  if ((await page.getByLabel("Name", { exact: true }).getAttribute("aria-invalid")) !== "true") throw new Error("the name is not marked invalid");
  await axe(page, "tokens-refused");
  say("refused", (await page.locator("#token-name-error").textContent()).trim().replace(/\s+/g, "_"));

  // Scope deploy only, narrowed to one application, for 30 days.
  await form.getByLabel("Name", { exact: true }).fill(name);
  await form.getByLabel("read", { exact: true }).uncheck();
  await form.getByLabel("deploy", { exact: true }).check();
  await form.getByLabel("Kind").selectOption("app");
  await form.getByLabel("Application", { exact: true }).selectOption({ label: appName });
  await form.getByRole("button", { name: "Add", exact: true }).click();
  await form.locator(`[data-resource="app:${appID}"]`).getByText(`application ${appName}`).waitFor(wait);
  await form.getByLabel("Expires").selectOption("30");
  await axe(page, "tokens-form");
  await shots(page, "tokens-form");
  await form.getByRole("button", { name: "Make the token" }).click();

  // The secret, once.
  const secretBox = page.locator("[data-token-secret]");
  await secretBox.waitFor(wait);
  const secret = await secretBox.inputValue();
  if (!/^cpt_\S{20,}$/.test(secret)) throw new Error("the token shown does not look like one: " + secret.slice(0, 6) + "…");
  await page.getByText("you will not see it again").waitFor(wait);
  await page.getByRole("button", { name: "Copy the token" }).waitFor(wait);
  const row = page.locator(`tr[data-token="${name}"]`);
  await row.and(page.locator('[data-state="live"]')).waitFor(wait);
  const id = await row.getAttribute("data-token-id");
  // The list never holds the secret.
  if ((await page.locator("table").textContent()).includes(secret)) throw new Error("the list shows the secret");
  await axe(page, "tokens-secret");
  await shots(page, "tokens-secret");
  writeFileSync(e.CAPSTAN_SECRET_FILE, secret, { mode: 0o600 });
  say("created", id);

  await page.getByRole("button", { name: "Done", exact: true }).click();
  await form.waitFor(wait);
  if (await page.locator("[data-token-secret]").count()) throw new Error("the secret is still shown after Done");
  const scopes = (await row.locator("[data-scopes]").textContent()).trim();
  if (scopes !== "deploy") throw new Error("the row's scopes: " + scopes);
  await row.locator("[data-resources]").getByText(`application ${appName}`).waitFor(wait);
  const expires = (await row.locator("[data-expires]").textContent()).trim();
  if (!/^in (29|30) d$/.test(expires)) throw new Error("the row's expiry: " + expires);
  await row.getByText("(you)").waitFor(wait);
  say("listed", expires.replace(/ /g, "_"));

  // The Go test used it: its last use shows, with the address.
  const ip = row.locator("[data-last-used-ip]");
  await refreshUntil(page, "the token's last use", async () => (await ip.count()) > 0);
  say("used", (await ip.textContent()).trim());

  // Revoking asks first; keeping it changes nothing.
  await row.getByRole("button", { name: `Revoke token ${name}` }).click();
  let dialog = page.getByRole("dialog", { name: "Revoke the API token" });
  await dialog.waitFor(wait);
  await axe(page, "tokens-revoke-dialog");
  await dialog.getByRole("button", { name: "Keep it" }).click();
  await dialog.waitFor({ state: "detached", ...wait });
  await row.and(page.locator('[data-state="live"]')).waitFor(wait);
  await row.getByRole("button", { name: `Revoke token ${name}` }).click();
  dialog = page.getByRole("dialog", { name: "Revoke the API token" });
  await dialog.getByRole("button", { name: `Revoke token ${name}` }).click();
  await row.and(page.locator('[data-state="revoked"]')).waitFor(wait);
  if (await row.getByRole("button", { name: /Revoke/ }).count()) throw new Error("a revoked token still offers Revoke");
  await axe(page, "tokens-revoked");
  await shots(page, "tokens-list");
  say("revoked", id);

  // The audit log tells it in sentences.
  await page.goto(env.url + "/audit?action=token.*");
  await page.getByRole("heading", { name: "Audit log" }).waitFor(wait);
  const sentence = (text) => page.locator("tr[data-audit] .audit-sentence").filter({ hasText: text }).first().waitFor(wait);
  await sentence(`${env.email} created API token ${name} with scope deploy on application ${appID}`);
  await sentence(`${env.email} used API token ${name} for the first time`);
  await sentence(`${env.email} revoked API token ${name}`);
  await axe(page, "audit-tokens");
  say("audited");

  // A member, in a browser of their own.
  const context = await page.context().browser().newContext({ viewport: { width: 1280, height: 720 } });
  const problems = [];
  const p = await context.newPage();
  await watchPage(p, problems);
  await signIn(p, "/tokens", member);
  await p.waitForURL((u) => u.pathname === "/platform/tokens", wait);
  const mform = p.getByRole("form", { name: "New API token" });
  await mform.waitFor(wait);
  await p.getByText("A member's token can only read").waitFor(wait);
  for (const s of ["read:secrets", "deploy", "operate", "write", "admin"])
    if (!(await mform.getByLabel(s, { exact: true }).isDisabled())) throw new Error(`a member may choose the scope ${s}`);
  if (await mform.getByLabel("Expires").locator('option[value="never"]').count()) throw new Error("a member is offered a token that never expires");
  await p.getByText("No tokens yet.").waitFor(wait);
  if (await p.locator(`tr[data-token="${name}"]`).count()) throw new Error("a member sees the administrator's token");
  await axe(p, "tokens-member");
  await shots(p, "tokens-member");
  await mform.getByLabel("Name", { exact: true }).fill("member read");
  await mform.getByRole("button", { name: "Make the token" }).click();
  await p.locator("[data-token-secret]").waitFor(wait);
  await p.getByRole("button", { name: "Done", exact: true }).click();
  await p.locator('tr[data-token="member read"][data-state="live"]').waitFor(wait);
  if ((await p.getByRole("columnheader", { name: "Owner" }).count()) !== 0) throw new Error("a member's list has an owner column");
  if (problems.length) throw new Error("member page problems:\n" + problems.join("\n"));
  await context.close();
  say("member");
}, "/platform");

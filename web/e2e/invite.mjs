// The browser test of invitations, run by the Go test TestConsoleInvite
// (e2e/console_invite_test.go) against a control plane without an SMTP
// server: the administrator invites from the Users screen and copies the
// link it shows once; the link opens in a fresh browser context (the
// invitee's own, signed in nowhere), which reads whom it is for, takes a
// password, shows the second factor as a QR code and as text, refuses a
// wrong code next to its field, and with the code computed from the shown
// secret creates the account and lands signed in; the administrator's
// list then shows the invitation accepted.
//
// axe-core runs on every screen and state; screenshots go to
// web/test-results/. Lines on stdout report to the Go test.
import { axe, chromiumArgs, env, say, session, shots, totp, wait, watchPage } from "./lib.mjs";

const invitee = process.env.CAPSTAN_INVITEE;
const password = "a long invitee passphrase 31";

await session(async (page) => {
  await page.getByRole("heading", { name: "Users" }).waitFor(wait);
  const form = page.getByRole("form", { name: "Invite a user" });
  await form.waitFor(wait);
  await axe(page, "users-invite-form");
  await form.getByLabel("E-mail").fill(invitee);
  await form.getByLabel("Role").selectOption("member");
  await form.getByRole("button", { name: "Invite" }).click();
  const linkBox = page.locator("[data-invite-link]");
  await linkBox.waitFor(wait);
  const link = (await linkBox.textContent()).trim();
  await page.locator(`[data-invitation="${invitee}"]`).getByText("pending").waitFor(wait);
  await axe(page, "users-invited");
  await shots(page, "users-invited");
  say("invited", link.replace(/#.*/, "#…"));

  // The invitee, in a browser context of its own.
  const context = await page.context().browser().newContext({ viewport: { width: 1280, height: 720 } });
  const problems = [];
  const p = await context.newPage();
  await watchPage(p, problems);
  await p.goto(link);
  await p.locator(`[data-invitee="${invitee}"]`).waitFor(wait);
  await axe(p, "invite");
  await shots(p, "invite");
  await p.getByLabel("Password", { exact: true }).fill(password);
  await p.getByLabel("The password again").fill(password + "x");
  await p.getByRole("button", { name: "Continue" }).click();
  await p.locator("#repeat-error").waitFor(wait);
  await p.getByLabel("The password again").fill(password);
  await p.getByRole("button", { name: "Continue" }).click();
  await p.getByRole("img", { name: "QR code of your second factor's secret" }).waitFor(wait);
  const secret = (await p.locator("[data-totp-secret]").textContent()).trim();
  await axe(p, "invite-code");
  await shots(p, "invite-code");
  // A wrong code: refused next to its field.
  const right = totp(secret);
  await p.getByLabel("Code from your authenticator app").fill(right === "000000" ? "111111" : "000000");
  await p.getByRole("button", { name: "Create my account" }).click();
  await p.locator("#code-error").waitFor(wait);
  await axe(p, "invite-code-error");
  await p.getByLabel("Code from your authenticator app").fill(totp(secret));
  await p.getByRole("button", { name: "Create my account" }).click();
  await p.waitForURL((u) => u.pathname !== "/invite", wait);
  await p.getByText("Live", { exact: false }).first().waitFor(wait);
  await p.getByText(invitee).first().waitFor(wait);
  if (new URL(p.url()).hash) throw new Error("the token stayed in the address: " + p.url());
  if (problems.length) throw new Error("invitee page problems:\n" + problems.join("\n"));
  await context.close();
  say("accepted", invitee);

  // The administrator's list: accepted, and the user is listed.
  await page.reload();
  await page.locator(`[data-invitation="${invitee}"]`).getByText("accepted").waitFor(wait);
  await page.locator(`[data-user="${invitee}"]`).waitFor(wait);
  await axe(page, "users-accepted");
  say("listed");
}, "/platform/users");

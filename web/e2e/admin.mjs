// The browser test of the inbox, notification channels, e-mail, the audit
// log, the platform screen and the keyboard shortcuts, run by the Go test
// TestConsoleAdmin (e2e/console_admin_test.go) against a real control
// plane with a real agent, a webhook receiver and an SMTP server of the
// test:
//
//   the inbox → an alert's item arrives live (the Go test opens the alert
//   when this script prints "inbox-ready") and is marked read → a webhook
//   channel (a field error, then created; its secret shown once) → its
//   test message delivered → a test e-mail → the audit log filtered → the
//   platform's versions → the recovery kit refused with a wrong password,
//   then downloaded → users: a member made an administrator, disabled and
//   given a new second factor → the
//   shortcuts' help, "/" and "g" keys.
//
// axe-core runs on every screen and state; screenshots go to
// web/test-results/. Lines on stdout report to the Go test.
import { join } from "node:path";
import { axe, expectTitle, env, outDir, say, session, shots, wait } from "./lib.mjs";

const hook = process.env.CAPSTAN_HOOK_URL;
const mailTo = "ops@example.com";
const member = process.env.CAPSTAN_MEMBER_EMAIL;

await session(async (page) => {
  // The inbox, empty, then an item arriving live.
  await page.getByRole("heading", { name: "Inbox" }).waitFor(wait);
  await page.getByText("No notifications yet.").waitFor(wait);
  await axe(page, "inbox-empty");
  const navigations = [];
  page.on("framenavigated", (f) => f === page.mainFrame() && navigations.push(f.url()));
  say("inbox-ready");
  const item = page.locator(".inbox-item.unread").first();
  await item.waitFor(wait);
  await page.locator("[data-unread]").waitFor(wait); // the header's count
  const unread = await page.locator("[data-unread]").textContent();
  if (navigations.length) throw new Error("the page reloaded while the item arrived: " + navigations.join(", "));
  const id = await item.getAttribute("data-item");
  await axe(page, "inbox");
  await shots(page, "inbox");
  await item.getByRole("button", { name: /^Mark read/ }).click();
  await page.getByText("Nothing unread.").waitFor(wait);
  await page.locator("[data-unread]").waitFor({ state: "detached", ...wait });
  say("inbox-read", id, unread.trim());

  // A webhook channel: an http:// URL is refused next to its field.
  await page.getByRole("link", { name: "Notification settings" }).click();
  await page.getByRole("heading", { name: "Notification settings" }).waitFor(wait);
  await page.getByRole("heading", { name: "SMTP server" }).waitFor(wait);
  await axe(page, "notifications");
  await page.getByRole("button", { name: "New channel" }).click();
  await page.getByLabel("Kind").selectOption("webhook");
  await page.getByLabel("Name").fill("browser-hook");
  await page.getByLabel("Endpoint URL").fill("http://127.0.0.1:1/hook");
  await page.getByRole("checkbox", { name: "alert.resolved" }).check();
  await page.getByRole("button", { name: "Create channel" }).click();
  await page.locator("#new-url-error").waitFor(wait);
  await axe(page, "channel-form-error");
  await shots(page, "channel-form");
  await page.getByLabel("Endpoint URL").fill(hook);
  await page.getByRole("button", { name: "Create channel" }).click();
  const secret = (await page.locator("[data-secret]").textContent(wait)).trim();
  if (!secret.startsWith("whsec_")) throw new Error("no signing secret shown: " + secret);
  await axe(page, "channel-secret");
  await page.getByRole("button", { name: "I have copied it" }).click();
  if (await page.locator("[data-secret]").count()) throw new Error("the secret is still shown");
  say("channel-created", secret);

  // Its detail: a test message, delivered.
  await page.getByRole("link", { name: "browser-hook" }).click();
  await page.getByRole("heading", { name: "browser-hook" }).waitFor(wait);
  await page.getByRole("button", { name: "Send a test message" }).click();
  await page.locator("[data-test-result]").waitFor(wait);
  const result = await page.locator("[data-test-result]").getAttribute("data-test-result");
  if (result !== "delivered") throw new Error("the test message: " + (await page.locator("[data-test-result]").textContent()));
  const channelID = page.url().split("/").pop();
  await axe(page, "channel");
  await shots(page, "channel");
  // Deleting asks first, naming the channel; keep it.
  await page.getByRole("button", { name: "Delete", exact: true }).click();
  await page.getByRole("button", { name: "Delete browser-hook" }).waitFor(wait);
  await axe(page, "channel-delete-confirm");
  await page.getByRole("button", { name: "Keep it" }).click();
  say("channel-tested", channelID);

  // A test e-mail through the control plane's SMTP server.
  await page.getByRole("link", { name: "← Notification settings" }).click();
  await page.getByLabel("Send a test e-mail to").fill(mailTo);
  await page.getByRole("button", { name: "Send test e-mail" }).click();
  await page.getByText("Sent to " + mailTo).waitFor(wait);
  await axe(page, "email");
  await shots(page, "notifications");
  say("email-sent", mailTo);

  // The audit log, filtered by action and actor; "/" focuses its search.
  await page.getByRole("link", { name: "Audit" }).click();
  await page.getByRole("heading", { name: "Audit log" }).waitFor(wait);
  await expectTitle(page, "Audit log · Capstan");
  await page.locator("tr[data-audit]").first().waitFor(wait);
  await page.keyboard.press("/");
  const focused = await page.evaluate(() => document.activeElement?.id);
  if (focused !== "audit-action") throw new Error("/ focused " + focused + ", not the audit log's search");
  await page.keyboard.type("notification.channel.*");
  await page.getByLabel("Actor").fill(env.email);
  await page.getByRole("button", { name: "Filter", exact: true }).click();
  await page.waitForURL(/action=notification\.channel/, wait);
  // The rows of before the filter stay until the filtered answer comes.
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll("tr[data-audit]")];
    return rows.length > 0 && rows.every((r) => r.getAttribute("data-audit").startsWith("notification.channel."));
  }, null, wait);
  const actions = await page.locator("tr[data-audit]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-audit")));
  if (!actions.length || actions.some((a) => !a.startsWith("notification.channel."))) throw new Error("filtered audit log: " + actions.join(", "));
  // Each entry reads as a sentence.
  await page.locator("tr[data-audit]").filter({ hasText: `${env.email} created notification channel browser-hook` }).first().waitFor(wait);
  await axe(page, "audit");
  await shots(page, "audit");
  say("audit-filtered", actions.join(","));

  // The platform: versions, agents, the recovery kit.
  await page.getByRole("link", { name: "Platform" }).click();
  await page.getByRole("heading", { name: "Platform" }).waitFor(wait);
  const version = (await page.locator("[data-version]").textContent(wait)).trim();
  const agentVersions = await page.locator("tr[data-agent-version]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-agent-version")));
  await page.getByLabel("Your password").fill("not my password at all");
  await page.getByRole("button", { name: "Download the recovery kit" }).click();
  await page.getByRole("alert").filter({ hasText: "not this account's password" }).waitFor(wait);
  await axe(page, "platform-wrong-password");
  await page.getByLabel("Your password").fill(env.password);
  const [download] = await Promise.all([
    page.waitForEvent("download", wait),
    page.getByRole("button", { name: "Download the recovery kit" }).click(),
  ]);
  const kit = join(outDir, "admin-recovery-kit.age");
  await download.saveAs(kit);
  await page.getByText("Downloaded ").waitFor(wait);
  await axe(page, "platform");
  await shots(page, "platform");
  say("platform", version, agentVersions.join(","), download.suggestedFilename(), kit);

  // Users: a member made an administrator, disabled, and given a new
  // second factor (its secret shown once).
  await page.getByRole("link", { name: "Manage users" }).click();
  await page.getByRole("heading", { name: "Users" }).waitFor(wait);
  const row = page.locator(`[data-user="${member}"]`);
  await row.waitFor(wait);
  await axe(page, "users");
  await shots(page, "users");
  const confirmed = async (button) => {
    await row.getByRole("button", { name: button }).click();
    await page.getByRole("dialog").getByRole("button", { name: button }).click();
  };
  await confirmed("Make an administrator");
  await row.getByText("administrator", { exact: true }).waitFor(wait);
  await confirmed("Disable");
  await row.getByText("disabled").waitFor(wait);
  await confirmed("Reset the second factor");
  const totp = (await page.locator("[data-totp-secret]").textContent(wait)).trim();
  await axe(page, "users-new-secret");
  say("users", totp);

  // The shortcuts: "?" shows their help; "g i" goes to the inbox.
  await page.keyboard.press("?");
  await page.getByRole("heading", { name: "Keyboard shortcuts" }).waitFor(wait);
  await axe(page, "shortcuts");
  await shots(page, "shortcuts");
  await page.keyboard.press("Escape");
  await page.getByRole("heading", { name: "Keyboard shortcuts" }).waitFor({ state: "detached", ...wait });
  await page.keyboard.press("g");
  await page.keyboard.press("i");
  await page.waitForURL(/\/inbox$/, wait);
  await page.getByRole("heading", { name: "Inbox" }).waitFor(wait);
  say("shortcuts");
}, "/inbox");

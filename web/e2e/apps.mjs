// The applications screens' browser test, run by TestConsoleApps
// (e2e/console_apps_test.go) against a real control plane, Caddy and agent
// with Docker:
//
//   the create form with a field error → create an application of the
//   first image, published on a port (it deploys; its page shows the
//   address) → deploy the second image and watch its
//   events arrive live → roll back to the first release from the
//   deployments list → change the environment without reading it → add a
//   domain and check it → the traffic chart → the log → the deployment →
//   the list → the same application as a member, read-only.
//
// axe-core runs on every screen and state; screenshots of each go to
// web/test-results/. Lines on stdout report to the Go test, which checks
// each step through the API.
import { axe, env, launch, say, session, shots, signIn, wait, watchPage } from "./lib.mjs";

const v1 = process.env.CAPSTAN_IMAGE_V1;
const v2 = process.env.CAPSTAN_IMAGE_V2;
const host = process.env.CAPSTAN_HOST;
const publishPort = process.env.CAPSTAN_PUBLISH_PORT;
const member = {
  email: process.env.CAPSTAN_MEMBER_EMAIL,
  password: process.env.CAPSTAN_MEMBER_PASSWORD,
  secret: process.env.CAPSTAN_MEMBER_TOTP_SECRET,
};
const long = { timeout: 180_000 };

// until retries step until it returns true, within ms.
async function until(what, ms, step) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await step()) return;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms / 1000} s`);
  }
}

const tab = (page, name) => page.getByRole("navigation", { name: "Application sections" }).getByRole("link", { name, exact: true });

await session(async (page) => {
  await page.getByRole("heading", { name: "Applications" }).waitFor(wait);
  await axe(page, "apps-empty");

  // The create form: a field error shown next to its field.
  await page.getByRole("link", { name: "New application" }).click();
  await page.getByRole("heading", { name: "New application" }).waitFor(wait);
  const server = page.getByLabel("Server", { exact: true });
  await server.locator("option").nth(1).waitFor({ state: "attached", ...wait });
  await server.selectOption({ index: 1 });
  await page.getByLabel("Name", { exact: true }).fill("Not A Name!");
  await page.getByRole("textbox", { name: "Image", exact: true }).fill(v1);
  await page.getByLabel("Container port").fill("8080");
  await page.getByLabel("Health path").fill("/health");
  await page.getByLabel("Published port").fill(publishPort);
  await page.getByRole("button", { name: "Add environment variable" }).click();
  await page.getByLabel("Environment variables: name 1").fill("GREETING");
  await page.getByLabel("Environment variables: value of GREETING").fill("one");
  await page.getByRole("button", { name: "Create the application" }).click();
  await page.locator("#app-name-error").waitFor(wait);
  await axe(page, "app-create-error");
  await shots(page, "app-create-error");
  say("field-error");

  // Created: it deploys the first image.
  await page.getByLabel("Name", { exact: true }).fill("web");
  await page.getByRole("button", { name: "Create the application" }).click();
  await page.waitForURL(/\/applications\/app_[^/]+$/, wait);
  const appId = page.url().split("/").pop();
  await page.getByRole("heading", { name: "web" }).waitFor(wait);
  const first = page.locator('.deployment[data-status="succeeded"]');
  await first.waitFor(long);
  const firstId = await first.getAttribute("data-deployment");
  say("created", appId, firstId);
  // Its address: the published port, a link to it.
  const address = page.locator(".apps-addresses a", { hasText: `127.0.0.1:${publishPort}` });
  await address.waitFor(wait);
  say("published", await address.getAttribute("href"));

  // Deploy the second image from the page and watch its events arrive
  // while it runs: the page is never reloaded.
  const navigations = [];
  page.on("framenavigated", (f) => f === page.mainFrame() && navigations.push(f.url()));
  await page.evaluate((firstId) => {
    const seen = { base: new Map(), live: new Map() };
    globalThis.__live = seen;
    const look = () => {
      const el = document.querySelector(".deployment");
      const id = el?.getAttribute("data-deployment");
      if (!id || id === firstId) return;
      const n = el.querySelectorAll(".deploy-log > div").length;
      if (!seen.base.has(id)) seen.base.set(id, n);
      if (["queued", "running"].includes(el.getAttribute("data-status"))) seen.live.set(id, Math.max(seen.live.get(id) ?? 0, n - seen.base.get(id)));
    };
    new MutationObserver(look).observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
  }, firstId);
  await page.getByLabel("Image for this deployment").fill(v2);
  await page.getByRole("button", { name: "Deploy now" }).click();
  const second = page.locator(`.deployment:not([data-deployment="${firstId}"])`);
  await second.waitFor(wait);
  const secondId = await second.getAttribute("data-deployment");
  await page.locator(`.deployment[data-deployment="${secondId}"][data-status="succeeded"]`).waitFor(long);
  if (navigations.length) throw new Error("the page reloaded while the deployment ran: " + navigations.join(", "));
  const liveEvents = await page.evaluate((id) => globalThis.__live.live.get(id) ?? 0, secondId);
  say("deployed-live", secondId, String(liveEvents));
  await axe(page, "app-detail");
  await shots(page, "app-detail");

  // Roll back to the first release: the confirmation names it.
  await tab(page, "Deployments").click();
  const row = page.locator(`tr[data-deployment="${firstId}"]`);
  await row.waitFor(wait);
  await axe(page, "app-deployments");
  await shots(page, "app-deployments");
  await row.getByRole("button", { name: /^Roll back to / }).click();
  const dialog = page.getByRole("dialog");
  await dialog.getByRole("heading").waitFor(wait);
  const asked = await dialog.textContent();
  if (!asked.includes(v1) || !asked.includes(firstId)) throw new Error("the rollback confirmation does not name the release: " + asked);
  await axe(page, "rollback-confirm");
  await dialog.getByRole("button", { name: /^Roll back to / }).click();
  const newest = page.locator("table[aria-label=Deployments] tbody tr").first();
  let rollbackId = "";
  await until("the rollback deployment succeeds", 180_000, async () => {
    rollbackId = (await newest.getAttribute("data-deployment")) ?? "";
    if ([firstId, secondId, ""].includes(rollbackId)) return false;
    return newest.locator(".badge", { hasText: "succeeded" }).waitFor({ timeout: 2000 }).then(() => true, () => false);
  });
  await newest.locator(".tag", { hasText: "current" }).waitFor(wait);
  say("rolled-back", rollbackId);

  // The environment: names only; a bad name refused next to its row,
  // then a value replaced and a variable added without reading any.
  await tab(page, "Environment").click();
  await page.locator('tr[data-env="GREETING"]').waitFor(wait);
  if ((await page.locator("input[type=password]").count()) !== 0) throw new Error("the env editor shows value inputs before asked");
  await page.getByRole("button", { name: "Add a variable" }).click();
  const added = page.locator("table[aria-label=Variables] tbody tr").last();
  await added.locator("input:not([type=password])").fill("1BAD");
  await added.locator("input[type=password]").fill("x");
  await page.getByRole("button", { name: "Save the environment" }).click();
  await added.locator(".field-error").waitFor(wait);
  await axe(page, "app-env-error");
  await added.locator("input:not([type=password])").fill("EXTRA");
  await page.getByRole("button", { name: "Replace value of GREETING" }).click();
  await page.getByLabel("New value of GREETING").fill("two");
  await page.getByRole("button", { name: "Save the environment" }).click();
  await page.getByText("Saved: the next deployment gets it.").waitFor(wait);
  await page.locator('tr[data-env="EXTRA"]').waitFor(wait);
  say("env-saved");
  await axe(page, "app-env");
  await shots(page, "app-env");

  // A domain with a certificate from the proxy's local CA, checked.
  await tab(page, "Domains").click();
  await page.getByLabel("Hostname").fill(host);
  await page.getByLabel("TLS", { exact: true }).selectOption("internal");
  await page.getByRole("button", { name: "Add the domain" }).click();
  await page.getByText("The server's proxy serves the change.").waitFor(long);
  const card = page.locator(`.domain[data-domain="${host}"]`);
  await card.waitFor(wait);
  say("domain-added");
  // The proxy obtains the certificate a moment after it serves the site:
  // check again until the check finds it.
  await until("the domain check finds the certificate", 180_000, async () => {
    const before = (await card.getAttribute("data-checked-at")) ?? "";
    await card.getByRole("button", { name: `Check ${host}` }).click();
    await page.waitForFunction(([h, b]) => {
      const at = document.querySelector(`.domain[data-domain="${h}"]`)?.getAttribute("data-checked-at") ?? "";
      return at !== "" && at !== b;
    }, [host, before], long);
    return (await card.getAttribute("data-cert")) === "served";
  });
  say("domain-checked");
  await axe(page, "app-domains");
  await shots(page, "app-domains");

  // The traffic the proxy reports: the Go test sent 21 requests to the
  // site when the domain was added (its first answer, then 20 more); the
  // agent reports every 10 s.
  await tab(page, "Traffic").click();
  const total = page.locator("dd[data-total]");
  await total.waitFor(wait);
  let count = 0;
  await until("the traffic shows the requests", 180_000, async () => {
    count = Number(await total.getAttribute("data-total"));
    if (count >= 21) return true;
    await page.getByRole("button", { name: "Refresh" }).click();
    return page.waitForFunction(() => Number(document.querySelector("dd[data-total]")?.getAttribute("data-total")) >= 21, null, { timeout: 5000 })
      .then(() => false, () => false);
  });
  await page.locator(".chart canvas").first().waitFor(wait);
  say("traffic-seen", String(count));
  await axe(page, "app-traffic");
  await shots(page, "app-traffic");

  // The live container's log.
  await tab(page, "Logs").click();
  await page.getByRole("button", { name: "Read the log" }).click();
  await page.getByLabel("Log lines").filter({ hasText: "listening" }).waitFor(long);
  say("logs-read");
  await axe(page, "app-logs");
  await shots(page, "app-logs");

  // The rollback's deployment, and the list.
  await page.goto(env.url + "/deployments/" + rollbackId);
  await page.getByRole("heading", { name: "Deployment of web" }).waitFor(wait);
  await page.locator('.deployment[data-status="succeeded"]').waitFor(wait);
  await axe(page, "deployment");
  await shots(page, "deployment");
  await page.getByRole("link", { name: "Applications", exact: true }).click();
  await page.locator('tr[data-app="web"]').waitFor(wait);
  await axe(page, "apps-list");
  await shots(page, "apps-list");

  // A member sees the application read-only: no deploy, rollback,
  // settings, logs or env values.
  const browser = await launch();
  const problems = [];
  try {
    const mp = await (await browser.newContext({ viewport: { width: 1280, height: 720 } })).newPage();
    await watchPage(mp, problems);
    await signIn(mp, `/applications/${appId}`, member);
    await mp.getByRole("heading", { name: "web" }).waitFor(wait);
    await mp.locator(".deployment").waitFor(wait);
    for (const [what, n] of [
      ["a Deploy button", await mp.getByRole("button", { name: "Deploy now" }).count()],
      ["a Settings tab", await tab(mp, "Settings").count()],
      ["a Logs tab", await tab(mp, "Logs").count()],
    ]) if (n) throw new Error(`a member sees ${what}`);
    await axe(mp, "app-member");
    await shots(mp, "app-member");
    await tab(mp, "Environment").click();
    await mp.getByText("GREETING").waitFor(wait);
    if ((await mp.locator("input").count()) !== 0) throw new Error("a member gets env inputs");
    await tab(mp, "Deployments").click();
    await mp.locator(`tr[data-deployment="${firstId}"]`).waitFor(wait);
    if ((await mp.getByRole("button", { name: /Roll back/ }).count()) !== 0) throw new Error("a member sees Roll back");
    await axe(mp, "app-member-deployments");
    await tab(mp, "Domains").click();
    await mp.locator(`.domain[data-domain="${host}"]`).waitFor(wait);
    if ((await mp.getByRole("button").filter({ hasText: /Add the domain|Remove|Check/ }).count()) !== 0) throw new Error("a member sees domain actions");
    await axe(mp, "app-member-domains");
    if (problems.length) throw new Error("member page problems:\n" + problems.join("\n"));
    say("member-read-only");
  } finally {
    await browser.close();
  }
}, "/applications");

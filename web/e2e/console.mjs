// The console's browser test, run by the Go test TestConsoleInBrowser
// (e2e/console_test.go) against a real control plane, with a real agent
// that the Go test starts when this script prints the enrollment token:
//
//   sign in with a computed TOTP code → the fleet → enroll a server and
//   watch it come online without reloading → restart a container and watch
//   its job finish live → its log's last lines at once, filtered by text
//   and priority, then followed → the jobs list naming the job's server
//   and actor, filtered through its address → the job → the audit log's
//   sentence of the restart.
//
// Along the way: each page's document title, a tab's own address (a deep
// link to the server's Containers tab, back and forward), and the header
// on one row at 1280 px.
//
// axe-core runs on every screen; screenshots of each, in light and dark
// and at phone size, go to web/test-results/. Lines on stdout report to
// the Go test: "enroll-token T", "job-succeeded ID SEEN_MS", and the steps.
import { axe, expectTitle, launch, oneRowNav, say, shots, totp, watchPage } from "./lib.mjs";

const url = process.env.CAPSTAN_URL;
const email = process.env.CAPSTAN_EMAIL;
const password = process.env.CAPSTAN_PASSWORD;
const secret = process.env.CAPSTAN_TOTP_SECRET;
const container = process.env.CAPSTAN_CONTAINER;
const wait = { timeout: 90_000 };

const browser = await launch();
const problems = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 720 } });
  const page = await context.newPage();
  await watchPage(page, problems);

  // A page of the console before signing in: sign-in, then back to it.
  await page.goto(url + "/jobs");
  await page.waitForURL(/\/sign-in\?next=%2Fjobs/, wait);
  await page.getByLabel("E-mail").waitFor(wait);
  await axe(page, "sign-in");
  await shots(page, "sign-in");
  await page.getByLabel("E-mail").fill(email);
  await page.getByLabel("Password").fill("not the password");
  await page.getByRole("button", { name: "Continue" }).click();
  await page.getByRole("alert").first().waitFor(wait); // the problem, shown
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Continue" }).click();
  // The code step starts with an empty code box.
  const codeBox = page.getByLabel("Code from your authenticator app");
  await codeBox.waitFor(wait);
  if ((await codeBox.inputValue()) !== "") throw new Error("the code box starts with " + (await codeBox.inputValue()));
  // Back: the address stays, the password step starts afresh and works.
  await page.getByRole("button", { name: "Back" }).click();
  await page.getByLabel("Password").waitFor(wait);
  if ((await page.getByLabel("E-mail").inputValue()) !== email) throw new Error("Back lost the e-mail address");
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Continue" }).click();
  // A wrong code keeps the code step, with the tries left; the right one
  // then signs in.
  const now = Date.now();
  const near = [-30_000, 0, 30_000].map((d) => totp(secret, now + d));
  let wrong = 123456;
  while (near.includes(String(wrong))) wrong++;
  await codeBox.fill(String(wrong));
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByText("4 more tries").waitFor(wait);
  await codeBox.fill(totp(secret));
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(url + "/jobs", wait);
  await page.getByRole("heading", { name: "Jobs" }).waitFor(wait);
  await page.getByText("Live", { exact: false }).first().waitFor(wait);
  await expectTitle(page, "Jobs · Capstan");
  say("signed-in");
  // The header holds on one row at 1280 px.
  await page.setViewportSize({ width: 1280, height: 800 });
  await oneRowNav(page);
  await page.setViewportSize({ width: 1280, height: 720 });
  // The access token lives in memory only; a reload renews it from the
  // refresh cookie, silently.
  const stored = await page.evaluate(() => localStorage.length + sessionStorage.length + document.cookie.length);
  if (stored !== 0) throw new Error("the console keeps something in storage or a script-readable cookie");
  await page.reload();
  await page.getByRole("heading", { name: "Jobs" }).waitFor(wait);
  if (!page.url().endsWith("/jobs")) throw new Error("a reload lost the page: " + page.url());

  // The fleet, empty.
  await page.getByRole("link", { name: "Servers" }).click();
  await page.getByRole("heading", { name: "Servers" }).waitFor(wait);
  await axe(page, "fleet");

  // Enroll: a field error shown next to its field, then the real thing.
  await page.getByRole("link", { name: "Enroll a server" }).click();
  await page.getByLabel("Name").fill("Not A Valid Name!");
  await page.getByRole("button", { name: "Create the install command" }).click();
  await page.locator("#name-error").waitFor(wait);
  await axe(page, "enroll");
  await shots(page, "enroll-form");
  await page.getByLabel("Name").fill("browser-1");
  await page.getByLabel("Tags").fill("web, e2e");
  await page.getByRole("button", { name: "Create the install command" }).click();
  const command = await page.locator("#install-command").textContent(wait);
  const token = command.match(/CAPSTAN_ENROLL_TOKEN=([^;\s]+);/)?.[1];
  if (!token) throw new Error("no token in the install command: " + command);
  await page.getByText("Waiting for the agent").waitFor(wait);
  await shots(page, "enroll-waiting");
  const navigations = [];
  page.on("framenavigated", (f) => f === page.mainFrame() && navigations.push(f.url()));
  say("enroll-token", token);
  // The Go test starts the agent now; the page learns it from the stream.
  await page.getByText("browser-1 is online").waitFor(wait);
  if (navigations.length) throw new Error("the page reloaded while waiting: " + navigations.join(", "));
  say("online-seen");
  await axe(page, "enroll-online");
  await shots(page, "enroll-online");

  // The server, its containers (the agent's inventory may come a moment
  // after it came online: reload until it lists the container).
  await page.getByRole("link", { name: "Open the server" }).click();
  await page.getByRole("heading", { name: "browser-1" }).waitFor(wait);
  await page.getByRole("heading", { name: "Facts" }).waitFor(wait);
  await expectTitle(page, "browser-1 · Servers · Capstan");
  const serverPath = new URL(page.url()).pathname;
  // What runs on it: none of the fleet's applications or databases yet.
  await page.getByText("No applications on this server.").waitFor(wait);
  await page.getByText("No databases on this server.").waitFor(wait);
  // Work under way is shown as information, not as a warning.
  const badge = await page.evaluate(() => {
    const b = document.createElement("span");
    b.className = "badge s-running";
    document.body.append(b);
    const colour = getComputedStyle(b).color;
    const probe = (v) => {
      const e = document.createElement("span");
      e.style.color = `var(${v})`;
      document.body.append(e);
      const c = getComputedStyle(e).color;
      e.remove();
      return c;
    };
    b.remove();
    return { colour, info: probe("--info"), warn: probe("--warn") };
  });
  if (badge.colour !== badge.info || badge.colour === badge.warn) throw new Error("the running badge's colour: " + JSON.stringify(badge));
  await axe(page, "server");
  await shots(page, "server");
  const row = page.locator(`tr[data-container="${container}"]`);
  const deadline = Date.now() + 90_000;
  for (;;) {
    await page.getByRole("tab", { name: "Containers" }).click();
    if (await row.waitFor({ timeout: 3000 }).then(() => true, () => false)) break;
    if (Date.now() > deadline) throw new Error("the container never appeared in the inventory");
    // The reload keeps the tab: its address says it.
    await page.reload();
    await page.getByRole("tab", { name: "Containers", selected: true }).waitFor(wait);
  }
  // The tab has its own address and title; a link to it opens it.
  await page.waitForURL((u) => u.pathname === serverPath + "/containers", wait);
  await expectTitle(page, "Containers · browser-1 · Servers · Capstan");
  await page.goto(url + serverPath + "/containers");
  await page.getByRole("tab", { name: "Containers", selected: true }).waitFor(wait);
  await row.waitFor(wait);
  // Back and forward step through the tabs.
  await page.getByRole("tab", { name: "Ports" }).click();
  await page.waitForURL((u) => u.pathname === serverPath + "/ports", wait);
  await page.goBack();
  await page.getByRole("tab", { name: "Containers", selected: true }).waitFor(wait);
  await page.goForward();
  await page.getByRole("tab", { name: "Ports", selected: true }).waitFor(wait);
  await page.goBack();
  await row.waitFor(wait);
  say("tab-linked");
  // The container's CPU and memory come with the agent's metric samples
  // (CPU and network rates from the second on): reload until they show.
  const memory = row.locator('[data-stat="memory"]', { hasText: "iB of " });
  const statsDeadline = Date.now() + 90_000;
  for (;;) {
    if (await memory.waitFor({ timeout: 3000 }).then(() => true, () => false)) break;
    if (Date.now() > statsDeadline) throw new Error("the container's CPU and memory never showed");
    await page.reload();
    await page.getByRole("tab", { name: "Containers", selected: true }).waitFor(wait);
    await row.waitFor(wait);
  }
  if (!/^\d+(\.\d)?%$/.test((await row.locator('[data-stat="cpu"]').textContent()) ?? "")) throw new Error("the container's CPU is not a percentage");
  // The images, with the container's among them.
  const images = page.getByRole("table", { name: "Images" });
  await images.getByRole("cell", { name: process.env.CAPSTAN_IMAGE }).waitFor(wait);
  // The engine's volumes and networks (its own bridge among them).
  await page.getByRole("table", { name: "Volumes" }).or(page.getByText("No volumes.")).first().waitFor(wait);
  await page.getByRole("table", { name: "Networks" }).getByRole("cell", { name: "bridge", exact: true }).first().waitFor(wait);
  await axe(page, "server-containers");
  await shots(page, "server-containers");
  // Inspect the container: the engine's document, environment values
  // hidden.
  await row.getByRole("button", { name: `Inspect ${container}` }).click();
  const inspected = page.locator(`[data-inspect="${container}"] pre.inspect`);
  await inspected.waitFor(wait);
  const doc = (await inspected.textContent()) ?? "";
  if (!doc.includes('"Config"') || !doc.includes(container)) throw new Error("the inspection does not show the container's document");
  if (doc.includes("/usr/local/sbin")) throw new Error("the inspection shows an environment value");
  await axe(page, "server-inspect");
  await page.locator(`[data-inspect="${container}"]`).getByRole("button", { name: "Close" }).click();
  // A prune lists what it would remove and asks first; keeping it
  // removes nothing (the engine is shared with other tests).
  await page.getByRole("button", { name: "Prune unused images and networks" }).click();
  const pruneDialog = page.getByRole("dialog");
  const nothing = page.locator("[data-prune-result]");
  await pruneDialog.or(nothing).first().waitFor(wait);
  if (await pruneDialog.isVisible()) {
    if (!(await pruneDialog.textContent()).includes("Frees up to")) throw new Error("the prune's confirmation does not say what it frees");
    await axe(page, "server-prune");
    await shots(page, "server-prune");
    await pruneDialog.getByRole("button", { name: "Keep it" }).click();
    await pruneDialog.waitFor({ state: "hidden", ...wait });
  }

  // Restart it: the confirmation names the container; the job shows live.
  await row.getByRole("button", { name: `Restart ${container}` }).click();
  const dialog = page.getByRole("dialog");
  await dialog.getByRole("heading").waitFor(wait);
  if (!(await dialog.textContent()).includes(`Restart ${container}?`)) throw new Error("the confirmation does not name the container");
  await axe(page, "confirm");
  await dialog.getByRole("button", { name: `Restart ${container}` }).click();
  const item = page.locator(".joblist li").filter({ hasText: "container.restart" });
  await item.waitFor(wait);
  const reloadsBefore = navigations.length;
  await page.evaluate(() => {
    const li = document.querySelector(".joblist li");
    const seen = () => li && li.querySelector(".badge")?.textContent === "succeeded";
    if (seen()) {
      globalThis.__succeededAt = Date.now();
      return;
    }
    new MutationObserver((_, obs) => {
      if (seen()) {
        globalThis.__succeededAt = Date.now();
        obs.disconnect();
      }
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  await item.locator(".badge", { hasText: "succeeded" }).waitFor(wait);
  if (navigations.length !== reloadsBefore) throw new Error("the page reloaded while the job ran");
  const seenAt = await page.evaluate(() => globalThis.__succeededAt);
  const jobHref = await item.getByRole("link").getAttribute("href");
  say("job-succeeded", jobHref.split("/").pop(), String(seenAt));

  // The container's log: its last lines as soon as it is chosen, then
  // following it as it grows.
  await page.getByRole("tab", { name: "Logs" }).click();
  await page.getByLabel("Log source").selectOption(`container:${container}`);
  const log = page.getByLabel("Log lines");
  await page.waitForFunction(() => {
    const t = document.querySelector("pre.log")?.textContent ?? "";
    return / out \d+ \d+/.test(t) && / err \d+ \d+/.test(t);
  }, null, wait);
  // Filtered in the page: by text, then by priority (stderr lines are err).
  const shownLines = async () => ((await log.textContent()) ?? "").split("\n").filter(Boolean);
  await page.getByLabel("Filter the lines").fill("out");
  await page.waitForFunction(() => !/ err \d+ \d+/.test(document.querySelector("pre.log")?.textContent ?? ""), null, wait);
  for (const l of await shownLines()) if (!/ out \d+ \d+$/.test(l)) throw new Error("the text filter let through: " + l);
  await page.getByLabel("Filter the lines").fill("");
  await page.getByLabel("Priority").selectOption("3");
  await page.waitForFunction(() => !/ out \d+ \d+/.test(document.querySelector("pre.log")?.textContent ?? ""), null, wait);
  const errLines = await shownLines();
  if (!errLines.length || errLines.some((l) => !/ err +err \d+ \d+$/.test(l))) throw new Error("the priority filter shows: " + errLines.join(" | "));
  await page.getByLabel("Priority").selectOption("");
  say("logs-filtered");
  const count = async () => ((await log.textContent()) ?? "").split("\n").length;
  const before = await count();
  await page.getByLabel("Follow").check();
  await page.waitForFunction((n) => (document.querySelector("pre.log")?.textContent ?? "").split("\n").length > n, before, wait);
  await page.getByLabel("Follow").uncheck();
  say("logs-followed");
  await axe(page, "server-logs");
  await shots(page, "server-logs");

  // The jobs list and the job, with its events. The list names the
  // job's server and who queued it, not their ids.
  const jobId = jobHref.split("/").pop();
  await page.getByRole("link", { name: "Jobs" }).click();
  const jobRow = page.locator(`tr[data-job="${jobId}"]`);
  await jobRow.waitFor(wait);
  const target = (await jobRow.locator("td[data-target]").textContent()) ?? "";
  const actor = (await jobRow.locator("td[data-actor]").textContent()) ?? "";
  if (target.trim() !== "browser-1" || /srv_/.test(target)) throw new Error("the job's target reads " + target);
  if (actor.trim() !== process.env.CAPSTAN_EMAIL) throw new Error("the job's actor reads " + actor);
  if (!/^srv_/.test((await jobRow.locator("td[data-target] [title]").first().getAttribute("title")) ?? "")) {
    throw new Error("the server's id is not on hover");
  }
  await axe(page, "jobs");
  await shots(page, "jobs");
  // A filter chosen goes into the address; the address alone gives the view.
  await page.getByLabel("State").selectOption("failed");
  await page.waitForURL(/\/jobs\?status=failed$/, wait);
  await page.getByText("No jobs match these filters.").waitFor(wait);
  await page.goto(url + "/jobs?type=container.restart&status=succeeded");
  await jobRow.waitFor(wait);
  const types = await page.locator("tr[data-job] td:first-child").allTextContents();
  if (!types.length || types.some((t) => t !== "container.restart")) throw new Error("filtered by type, the list shows " + types.join(", "));
  if ((await page.getByLabel("Type").inputValue()) !== "container.restart") throw new Error("the type filter does not show the address's");
  await page.goto(url + "/jobs?type=logs.read");
  await page.locator("tr[data-job]").first().waitFor(wait);
  if (await jobRow.count()) throw new Error("filtered by logs.read, the list shows the restart");
  say("jobs-filtered");
  await page.goto(url + jobHref);
  await page.getByRole("heading", { name: "container.restart" }).waitFor(wait);
  await page.getByRole("heading", { name: "Events" }).waitFor(wait);
  await expectTitle(page, "container.restart · Jobs · Capstan");
  await axe(page, "job");
  await shots(page, "job");

  // The audit log says it in words, with the raw entry behind a toggle.
  await page.getByRole("link", { name: "Audit" }).click();
  await expectTitle(page, "Audit log · Capstan");
  const sentence = `${email} restarted container ${container} on server browser-1`;
  const entry = page.locator('tr[data-audit="server.action.queued"]').filter({ hasText: sentence }).first();
  await entry.waitFor(wait);
  await entry.getByText("JSON").click();
  const raw = await entry.locator("pre").textContent();
  if (!raw.includes('"container.restart"')) throw new Error("the raw entry does not show the action's type: " + raw);
  say("audit-sentence");
  await axe(page, "audit-entry");

  // The fleet with its server.
  await page.getByRole("link", { name: "Servers" }).click();
  await page.getByRole("link", { name: "browser-1" }).waitFor(wait);
  await axe(page, "fleet-one");
  await shots(page, "fleet");

  if (problems.length) throw new Error("page problems:\n" + problems.join("\n"));
  say("done");
} finally {
  await browser.close();
}

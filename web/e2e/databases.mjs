// The databases screens' browser test, run by TestConsoleDatabases
// (e2e/console_databases_test.go) against a real control plane and agent,
// a real PostgreSQL and a real Redis:
//
//   register PostgreSQL through the form (a field error first) and see it
//   become ready live → a write refused while read-only is on → an error
//   with its position marked → writes with read-only off → the result
//   grid with column types → the explorer → a login, its password shown
//   once → the audited connection details → an export, downloaded → an
//   import → attach an application → register Redis → find keys by
//   pattern, open a hash → delete a key → create a managed Redis, stop and
//   start it → the charts → a member's read-only view.
//
// axe-core runs on every screen and state; screenshots in light and dark
// and at phone size go to web/test-results/. Lines on stdout are the
// steps the Go test checks (some with what it verifies through the API
// or the engine).
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { axe, say, session, shots, signIn, wait, watchPage } from "./lib.mjs";

const pg = {
  port: process.env.CAPSTAN_PG_PORT,
  user: process.env.CAPSTAN_PG_USER,
  password: process.env.CAPSTAN_PG_PASSWORD,
  database: process.env.CAPSTAN_PG_DATABASE,
};
const login = process.env.CAPSTAN_LOGIN;
const managed = process.env.CAPSTAN_MANAGED_NAME;
const member = { email: process.env.CAPSTAN_MEMBER_EMAIL, password: process.env.CAPSTAN_MEMBER_PASSWORD, secret: process.env.CAPSTAN_MEMBER_TOTP_SECRET };
const redis = { port: process.env.CAPSTAN_REDIS_PORT, password: process.env.CAPSTAN_REDIS_PASSWORD };

const nav = (page) => page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Databases" });

async function register(page, fields) {
  await nav(page).click();
  await page.getByRole("heading", { name: "Databases" }).waitFor(wait);
  await page.getByRole("link", { name: "Add an instance" }).click();
  await page.getByRole("radio", { name: "Register an external instance" }).check();
  await page.getByLabel("Name", { exact: true }).fill(fields.name);
  await page.getByLabel("Engine").selectOption(fields.engine);
  await page.getByLabel("Host").fill("127.0.0.1");
  await page.getByLabel("Port").fill(String(fields.port));
  if (fields.user) await page.getByLabel("User name").fill(fields.user);
  await page.getByLabel("Password").fill(fields.password);
  if (fields.database) await page.getByLabel("Database").fill(fields.database);
  await page.getByLabel("TLS", { exact: true }).selectOption("disable");
  await page.getByRole("button", { name: "Register and test" }).click();
  await page.getByRole("heading", { name: fields.name, exact: true }).waitFor(wait);
  // checking → ready arrives through the stream; no reload.
  await page.locator(".db .row .badge.s-ready").waitFor(wait);
  return page.url().split("/").pop();
}

// jobDone waits until the job the screen follows (named by text) ends
// live, and fails when it did not succeed.
async function jobDone(page, text) {
  const line = page.locator(".db-jobs li", { hasText: text }).and(page.locator('[data-status="succeeded"], [data-status="failed"], [data-status="cancelled"]'));
  await line.first().waitFor(wait);
  if ((await line.first().getAttribute("data-status")) !== "succeeded") throw new Error(`${text}: ${await line.first().textContent()}`);
}

// run types a statement into the query console and runs it.
async function run(page, sql) {
  await page.getByLabel("Statement", { exact: true }).fill(sql);
  await page.getByRole("button", { name: "Run", exact: true }).click();
  await page.getByRole("button", { name: "Run", exact: true }).and(page.locator(":enabled")).waitFor(wait);
}

await session(async (page) => {
  await nav(page).click();
  await page.getByRole("heading", { name: "Databases" }).waitFor(wait);
  await page.getByText("No database instances yet").waitFor(wait);
  await axe(page, "databases-empty");
  await shots(page, "databases-empty");

  // The form: a field error next to its field, then PostgreSQL.
  await page.getByRole("link", { name: "Add an instance" }).click();
  await page.getByRole("heading", { name: "Add a database instance" }).waitFor(wait);
  await axe(page, "database-new-managed");
  await shots(page, "database-new-managed");
  await page.getByRole("radio", { name: "Register an external instance" }).check();
  await page.getByLabel("Name", { exact: true }).fill("Not A Name!");
  await page.getByLabel("Host").fill("127.0.0.1");
  await page.getByLabel("TLS", { exact: true }).selectOption("disable");
  await page.getByRole("button", { name: "Register and test" }).click();
  await page.locator("#name-error").waitFor(wait);
  await axe(page, "database-new-external-error");
  await shots(page, "database-new-external-error");
  const pgID = await register(page, { name: "shop", engine: "postgres", port: pg.port, user: pg.user, password: pg.password, database: pg.database });
  say("pg-ready", pgID);
  await axe(page, "database-overview");
  await shots(page, "database-overview");

  // Query console: read-only is on; the engine refuses a write.
  await page.getByRole("tab", { name: "Query" }).click();
  if (!(await page.getByLabel("Read-only").isChecked())) throw new Error("read-only is not on by default");
  await axe(page, "database-query");
  await run(page, "CREATE TABLE console_orders (id int PRIMARY KEY, item text)");
  const refused = page.locator(".query-error");
  await refused.waitFor(wait);
  const text = await refused.textContent();
  if (!/read-only/.test(text)) throw new Error("the refused write does not show the engine's error: " + text);
  await axe(page, "database-query-refused");
  await shots(page, "database-query-refused");
  say("write-refused");

  // An error with a position: the word it points at is marked.
  await run(page, "SELECT id FROM no_such_table");
  const mark = page.locator(".query-error mark");
  await mark.waitFor(wait);
  if ((await mark.textContent()) !== "no_such_table") throw new Error("marked: " + (await mark.textContent()));
  await page.getByRole("button", { name: "Select it in the statement" }).click();
  const sel = await page.getByLabel("Statement", { exact: true }).evaluate((t) => t.value.slice(t.selectionStart, t.selectionEnd));
  if (sel !== "no_such_table") throw new Error("selected in the statement: " + sel);
  await axe(page, "database-query-error-position");
  await shots(page, "database-query-error-position");
  say("error-marked");

  // Read-only off: the writes go through.
  await page.getByLabel("Read-only").uncheck();
  await run(page, "CREATE TABLE console_orders (id int PRIMARY KEY, item text, price numeric(6,2))");
  await page.locator(".query-summary").getByText("Done").waitFor(wait);
  await run(page, "INSERT INTO console_orders VALUES (1, 'apple', 1.25), (2, 'pear', NULL)");
  await page.locator(".query-summary").getByText("2 affected").waitFor(wait);
  say("write-ok");

  // Back to read-only: the grid with the columns' types.
  await page.getByLabel("Read-only").check();
  await page.getByLabel("Max rows").fill("1");
  await run(page, "SELECT id, item, price FROM console_orders ORDER BY id");
  const grid = page.getByRole("table", { name: "Result" });
  await grid.waitFor(wait);
  const head = await grid.locator("thead").textContent();
  for (const want of ["idint4", "itemtext", "pricenumeric"]) if (!head.replace(/\s/g, "").includes(want)) throw new Error("grid header: " + head);
  if ((await grid.locator("tbody tr").count()) !== 1) throw new Error("max rows 1 showed more rows");
  await page.locator(".query-summary").getByText("more rows than max rows").waitFor(wait);
  await page.getByLabel("Max rows").fill("100");
  await run(page, "SELECT id, item, price FROM console_orders ORDER BY id");
  await grid.locator("td.null").getByText("NULL").waitFor(wait);
  await axe(page, "database-query-result");
  await shots(page, "database-query-result");
  say("grid");

  // A long statement: running, with Cancel; its timeout ends it on the
  // engine, whose error is shown.
  await page.getByLabel("Timeout (s)").fill("2");
  await page.getByLabel("Statement", { exact: true }).fill("SELECT pg_sleep(30)");
  await page.getByRole("button", { name: "Run", exact: true }).click();
  await page.getByRole("button", { name: "Cancel" }).waitFor(wait);
  await axe(page, "database-query-running");
  await page.locator(".query-error").getByText("statement timeout").waitFor(wait);
  await page.getByLabel("Timeout (s)").fill("30");
  // Cancel stops waiting for a statement (the engine ends it at its timeout).
  await page.getByLabel("Statement", { exact: true }).fill("SELECT pg_sleep(3)");
  await page.getByRole("button", { name: "Run", exact: true }).click();
  await page.getByRole("button", { name: "Cancel" }).click();
  await page.getByRole("button", { name: "Run", exact: true }).and(page.locator(":enabled")).waitFor(wait);
  if (await page.getByRole("button", { name: "Cancel" }).count()) throw new Error("still waiting after Cancel");
  say("long-query");

  // Explorer: the table and its columns.
  await page.getByRole("tab", { name: "Explore" }).click();
  await axe(page, "database-explore");
  await page.getByRole("button", { name: "Tables" }).click();
  await page.getByRole("button", { name: "public.console_orders" }).click();
  const cols = page.getByRole("table", { name: "Columns of public.console_orders" });
  await cols.getByText("primary").waitFor(wait);
  await axe(page, "database-explore-columns");
  await shots(page, "database-explore-columns");
  await page.getByRole("button", { name: "Users" }).click();
  await page.getByRole("table", { name: "Users" }).waitFor(wait);
  await page.getByRole("button", { name: "Statistics" }).click();
  await page.getByText("Cache hit ratio").waitFor(wait);
  await axe(page, "database-explore-stats");
  say("explored");

  // Logins: a new one, its password shown once.
  await page.getByRole("tab", { name: "Logins" }).click();
  await axe(page, "database-logins");
  await page.getByLabel("User name").fill(login);
  await page.getByRole("button", { name: "Create the login" }).click();
  const password = (await page.locator("#new-password").textContent(wait)).trim();
  if (password.length < 20) throw new Error("the new password is too short to be the real one");
  await jobDone(page, "create login " + login);
  await page.locator(`[data-login="${login}"] .badge.s-ready`).waitFor(wait);
  await axe(page, "database-login-password");
  await shots(page, "database-login-password");
  await page.getByRole("button", { name: "I have saved it" }).click();
  if (await page.locator("#new-password").count()) throw new Error("the password is still shown");
  say("login-created", login, createHash("sha256").update(password).digest("hex"));

  // A new password for the login: confirmed by name, shown once.
  await page.getByRole("button", { name: "New password for " + login }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Replace the password of " + login }).click();
  const rotated = (await page.locator("#new-password").textContent(wait)).trim();
  if (rotated === password || rotated.length < 20) throw new Error("the new password is not new");
  await jobDone(page, "new password for " + login);
  await page.getByRole("button", { name: "I have saved it" }).click();
  say("login-rotated", login, createHash("sha256").update(rotated).digest("hex"));

  // Databases: create one, then drop it (confirmed by name).
  await page.getByRole("button", { name: "Show the databases" }).click();
  await page.getByRole("table", { name: "Databases of the instance" }).getByRole("cell", { name: "shop", exact: true }).waitFor(wait);
  await page.getByLabel("Name", { exact: true }).fill("reports");
  await page.getByRole("button", { name: "Create the database" }).click();
  await jobDone(page, "create database reports");
  await page.getByRole("table", { name: "Databases of the instance" }).getByRole("cell", { name: "reports", exact: true }).waitFor(wait);
  say("database-created", "reports");
  await page.getByRole("button", { name: "Drop database reports" }).click();
  await page.getByRole("dialog").getByText("reports").first().waitFor(wait);
  await axe(page, "database-drop-confirm");
  await page.getByRole("dialog").getByRole("button", { name: "Drop reports" }).click();
  await jobDone(page, "drop database reports");
  await page.getByRole("table", { name: "Databases of the instance" }).getByRole("cell", { name: "reports", exact: true }).waitFor({ state: "detached", ...wait });
  say("database-dropped", "reports");

  // Connection details: only on an explicit action (audited).
  await page.getByRole("tab", { name: "Overview" }).click();
  if (await page.getByRole("table", { name: "Logins with passwords" }).count()) throw new Error("connection details shown unasked");
  await page.getByRole("button", { name: "Show the connection details" }).click();
  await page.getByRole("table", { name: "Logins with passwords" }).getByRole("cell", { name: login, exact: true }).waitFor(wait);
  await axe(page, "database-connection");
  await page.getByRole("button", { name: "Hide the connection details" }).click();
  say("connection-shown");

  // Export, followed live, then downloaded.
  await page.getByRole("tab", { name: "Export and import" }).click();
  await axe(page, "database-transfer");
  await page.getByRole("button", { name: "Export", exact: true }).click();
  await jobDone(page, "export");
  const download = page.waitForEvent("download", wait);
  await page.getByRole("button", { name: /^Download the export/ }).first().click();
  const file = readFileSync(await (await download).path());
  if (file.length < 20 || file[0] !== 0x1f || file[1] !== 0x8b) throw new Error(`the download is not a gzip file (${file.length} bytes)`);
  await shots(page, "database-export");
  say("exported");

  // Import a file: the upload, then its job live.
  await page.getByLabel("File", { exact: true }).setInputFiles({
    name: "items.sql",
    mimeType: "application/sql",
    buffer: Buffer.from("CREATE TABLE imported_items (id int);\nINSERT INTO imported_items VALUES (1), (2), (3);\n"),
  });
  await page.getByRole("button", { name: "Import", exact: true }).click();
  await jobDone(page, "items.sql");
  await axe(page, "database-import");
  await shots(page, "database-import");
  say("imported");

  // Attach the application: its own login, the URL in its env.
  await page.getByRole("tab", { name: "Attach" }).click();
  await page.getByLabel("Application", { exact: true }).selectOption({ label: "shopweb" });
  await axe(page, "database-attach");
  await page.getByRole("button", { name: "Attach", exact: true }).click();
  await jobDone(page, "for the application");
  await shots(page, "database-attach");
  say("attached");

  // Redis: the key browser.
  const redisID = await register(page, { name: "cache", engine: "redis", port: redis.port, password: redis.password });
  say("redis-ready", redisID);
  await page.getByRole("tab", { name: "Keys" }).click();
  await axe(page, "database-keys");
  await page.getByLabel("Pattern").fill("shop:*");
  await page.getByRole("button", { name: "Find keys" }).click();
  const keys = page.getByRole("table", { name: "Keys" });
  await keys.getByRole("button", { name: "shop:cart:1", exact: true }).waitFor(wait);
  if (await keys.getByText("other:key").count()) throw new Error("the pattern shop:* found other:key");
  for (const type of ["hash", "string", "list", "set"]) await keys.locator(".t-" + type).first().waitFor(wait);
  await keys.getByRole("button", { name: "shop:cart:1", exact: true }).click();
  await page.getByRole("table", { name: "Items of shop:cart:1" }).getByText("apple").waitFor(wait);
  await page.getByRole("region", { name: "Value of shop:cart:1" }).getByText("no expiry").waitFor(wait);
  await keys.getByRole("button", { name: "shop:greeting", exact: true }).click();
  await page.getByRole("region", { name: "Value of shop:greeting" }).locator("pre").getByText("hello").waitFor(wait);
  await axe(page, "database-keys-value");
  await shots(page, "database-keys-value");
  await page.getByRole("button", { name: "Server info" }).click();
  await page.getByRole("heading", { name: "Server info" }).waitFor(wait);
  await axe(page, "database-keys-info");
  say("kv-browsed");

  await page.getByRole("button", { name: "Delete shop:queue" }).click();
  await page.getByRole("dialog").getByText("shop:queue").first().waitFor(wait);
  await axe(page, "database-keys-confirm");
  await page.getByRole("button", { name: "Delete shop:queue" }).last().click();
  await page.getByText("Deleted shop:queue.").waitFor(wait);
  say("key-deleted", "shop:queue");

  // A managed instance: created through the form, ready live; stopped
  // and started again (the stop confirmed by name).
  await nav(page).click();
  await page.getByRole("link", { name: "Add an instance" }).click();
  await page.getByRole("radio", { name: "Create a managed instance" }).check();
  await page.getByLabel("Name", { exact: true }).fill(managed);
  await page.getByLabel("Engine").selectOption("redis");
  await page.getByLabel("Version").selectOption("7.2");
  await page.getByRole("button", { name: "Create the instance" }).click();
  await page.getByRole("heading", { name: managed, exact: true }).waitFor(wait);
  await page.locator(".db .row .badge.s-ready").waitFor({ timeout: 180_000 });
  say("managed-ready", page.url().split("/").pop());
  await page.getByRole("button", { name: "Stop", exact: true }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Stop " + managed }).click();
  await page.locator(".db .row .badge.s-stopped").waitFor(wait);
  await axe(page, "database-managed-stopped");
  await shots(page, "database-managed-stopped");
  say("managed-stopped");
  await page.getByRole("button", { name: "Start", exact: true }).click();
  await page.locator(".db .row .badge.s-ready").waitFor(wait);
  say("managed-started");

  // The instance's figures and charts (the agent samples it every second
  // in this test).
  await nav(page).click();
  await page.getByRole("link", { name: "shop", exact: true }).click();
  await page.getByRole("img", { name: "Connections chart" }).waitFor(wait);
  await page.getByRole("button", { name: "1 h", exact: true }).click();
  await page.getByRole("img", { name: "Connections chart" }).waitFor(wait);
  // Each chart fits its card.
  const wide = await page.evaluate(() =>
    [...document.querySelectorAll(".charts figure")].filter((f) => f.querySelector(".chart").scrollWidth > f.clientWidth).length,
  );
  if (wide) throw new Error(`${wide} charts are wider than their cards`);
  if (await page.getByRole("img", { name: "Memory chart" }).count()) throw new Error("a chart of the memory an external instance does not report");
  await axe(page, "database-metrics");
  await shots(page, "database-metrics");

  // The list with both instances.
  await nav(page).click();
  await page.locator('[data-instance="cache"] .badge.s-ready').waitFor(wait);
  await page.locator('[data-instance="shop"] .badge.s-ready').waitFor(wait);
  await axe(page, "databases");
  await shots(page, "databases");

  // A member reads the instances, their figures and logins' names: no
  // query console, no secrets, no controls.
  const other = await page.context().browser().newContext({ viewport: { width: 1280, height: 720 } });
  const mp = await other.newPage();
  const problems = [];
  await watchPage(mp, problems);
  await signIn(mp, "/databases", member);
  await mp.locator('[data-instance="shop"] .badge.s-ready').waitFor(wait);
  if (await mp.getByRole("link", { name: "Add an instance" }).count()) throw new Error("a member is offered to add an instance");
  await mp.getByRole("link", { name: "shop", exact: true }).click();
  await mp.getByRole("heading", { name: "Instance" }).waitFor(wait);
  const tabs = (await mp.getByRole("tab").allTextContents()).join(",");
  if (tabs !== "Overview,Logins") throw new Error("a member's tabs: " + tabs);
  for (const name of ["Show the connection details", "Forget the instance"])
    if (await mp.getByRole("button", { name }).count()) throw new Error(`a member is offered "${name}"`);
  await axe(mp, "database-member");
  await shots(mp, "database-member");
  await mp.getByRole("tab", { name: "Logins" }).click();
  await mp.getByRole("cell", { name: login, exact: true }).waitFor(wait);
  if (await mp.getByRole("button").filter({ hasText: /New password|Drop|Create/ }).count()) throw new Error("a member is offered login controls");
  await axe(mp, "database-member-logins");
  if (problems.length) throw new Error("member page problems:\n" + problems.join("\n"));
  await other.close();
  say("member-read-only");
}, "/databases");

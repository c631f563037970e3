// The monitoring screens' browser test, run by TestConsoleMonitoring
// (e2e/console_ops_test.go), which opened a real alert (CAPSTAN_ALERT) on
// the server CAPSTAN_SERVER before it started:
//
//   alerts → filter → acknowledge the alert → a new alert appears live
//   (the Go test opens it when this script says "waiting-live") → rules →
//   a refused rule shows its field error → create a rule scoped to the
//   server → edit it → disable it → delete another rule, confirmed.
//
// axe-core on every screen and state; screenshots in web/test-results/.
import { axe, env, say, session, shots, wait } from "./lib.mjs";

const alertID = process.env.CAPSTAN_ALERT;
const server = process.env.CAPSTAN_SERVER;

await session(async (page) => {
  const navigations = [];
  page.on("framenavigated", (f) => f === page.mainFrame() && navigations.push(f.url()));

  // The open alert, with the counts.
  await page.getByRole("heading", { name: "Monitoring" }).waitFor(wait);
  const row = page.locator(`tr[data-alert="${alertID}"]`);
  await row.waitFor(wait);
  if (!(await row.textContent()).includes(server)) throw new Error("the alert does not name its server");
  await axe(page, "alerts");
  await shots(page, "alerts");

  // A filter that matches nothing says so.
  await page.getByLabel("Severity").selectOption("critical");
  await page.getByText("No alert matches the filters.").waitFor(wait);
  await axe(page, "alerts-filtered");
  await page.getByLabel("Severity").selectOption("");
  await row.waitFor(wait);

  // Acknowledge it.
  await row.getByRole("button", { name: /^Acknowledge CPU high on / }).click();
  await row.getByText("by you").waitFor(wait);
  say("acknowledged", alertID);
  await axe(page, "alerts-acknowledged");
  await shots(page, "alerts-acknowledged");

  // A new alert arrives from the stream, without a reload.
  const before = navigations.length;
  say("waiting-live");
  await page.locator("tr[data-alert]").filter({ hasText: "Memory high" }).waitFor(wait);
  if (navigations.length !== before) throw new Error("the page reloaded while waiting for the alert");
  say("alert-live");

  // A notification's link to the alert (/alerts/ID) lands on it, marked.
  await page.goto(env.url + "/alerts/" + alertID);
  await page.waitForURL(/\/monitoring\?alert=/, wait);
  await page.locator(`tr[data-alert="${alertID}"][aria-current="true"]`).waitFor(wait);
  await axe(page, "alerts-linked");

  // Open and resolved.
  await page.getByLabel("State", { exact: true }).selectOption("all");
  await row.waitFor(wait);
  await axe(page, "alerts-all");

  // The rules.
  await page.getByRole("link", { name: "Rules" }).click();
  await page.getByRole("table", { name: "Alert rules" }).waitFor(wait);
  await page.getByRole("cell", { name: "old cpu", exact: true }).waitFor(wait);
  await axe(page, "rules");
  await shots(page, "rules");

  // A threshold out of bounds: the field error next to its field.
  await page.getByRole("button", { name: "New rule" }).click();
  const form = page.getByRole("form", { name: "New rule" });
  await form.getByLabel("Kind").selectOption("disk_high");
  await form.getByLabel("Name").fill("browser disk");
  await form.getByLabel("Threshold (percent)").fill("150");
  await form.getByRole("button", { name: "Create the rule" }).click();
  await page.locator("#threshold-error").waitFor(wait);
  await axe(page, "rule-form-error");
  await shots(page, "rule-form");

  // Scoped to the server, then created.
  await form.getByLabel("Threshold (percent)").fill("70");
  await form.getByLabel("Scope").selectOption("server");
  await form.getByLabel("Server").selectOption({ label: server });
  await form.getByRole("button", { name: "Create the rule" }).click();
  const rule = page.locator("tr[data-rule]").filter({ hasText: "browser disk" });
  await rule.waitFor(wait);
  if (!(await rule.textContent()).includes(`Server ${server}`)) throw new Error("the new rule does not name its server");
  say("rule-created");

  // Edit it, then disable it.
  await rule.getByRole("button", { name: "Edit browser disk" }).click();
  const edit = page.getByRole("form", { name: "Edit rule browser disk" });
  await edit.getByLabel("Threshold (percent)").fill("75");
  await axe(page, "rule-edit");
  await edit.getByRole("button", { name: "Save the rule" }).click();
  await rule.getByText("Disk high ≥ 75%").waitFor(wait);
  await rule.getByLabel("browser disk enabled").uncheck();
  await page.waitForFunction(() => {
    const r = [...document.querySelectorAll("tr[data-rule]")].find((tr) => tr.textContent.includes("browser disk"));
    return r && r.textContent.includes("off");
  }, null, wait);
  say("rule-saved");

  // Delete another rule: the confirmation names it.
  const old = page.locator("tr[data-rule]").filter({ hasText: "old cpu" });
  await old.getByRole("button", { name: "Delete old cpu" }).click();
  const dialog = page.getByRole("dialog");
  await dialog.getByRole("heading").waitFor(wait);
  if (!(await dialog.textContent()).includes("Delete rule old cpu?")) throw new Error("the confirmation does not name the rule");
  await axe(page, "rule-confirm");
  await dialog.getByRole("button", { name: "Delete rule old cpu" }).click();
  await old.waitFor({ state: "detached", ...wait });
  say("rule-deleted");
}, "/monitoring");

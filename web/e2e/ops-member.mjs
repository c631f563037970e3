// The monitoring and backup screens as a member sees them, run by
// TestConsoleMonitoring and TestConsoleBackups (e2e/console_ops_test.go)
// signed in as a member: everything reads, nothing is offered that only
// administrators may do, and no secret is in the page. CAPSTAN_PAGES is
// "monitoring" (with the open alert CAPSTAN_ALERT) or "backups" (with
// the backup CAPSTAN_RUN and the storage secret CAPSTAN_S3_SECRET).
//
// axe-core on every screen; screenshots in web/test-results/.
import { axe, env, say, session, shots, wait } from "./lib.mjs";

const e = process.env;

async function none(page, what, locator) {
  const n = await locator.count();
  if (n) throw new Error(`a member is offered ${what} (${n})`);
}

async function open(page, path, heading) {
  await page.goto(env.url + path);
  await page.getByRole("heading", { name: heading }).first().waitFor(wait);
}

await session(async (page) => {
  if (e.CAPSTAN_PAGES === "monitoring") {
    await page.locator(`tr[data-alert="${e.CAPSTAN_ALERT}"]`).waitFor(wait);
    await none(page, "acknowledging", page.getByRole("button", { name: /Acknowledge/ }));
    await axe(page, "alerts-member");
    await shots(page, "alerts-member");

    await open(page, "/monitoring/rules", "Monitoring");
    await page.getByRole("table", { name: "Alert rules" }).waitFor(wait);
    await none(page, "a new rule", page.getByRole("button", { name: "New rule" }));
    await none(page, "editing or deleting rules", page.getByRole("button", { name: /^(Edit|Delete) / }));
    await none(page, "enabling rules", page.getByRole("checkbox"));
    await axe(page, "rules-member");
    say("monitoring-read-only");
    return;
  }

  await page.locator(`tr[data-run="${e.CAPSTAN_RUN}"]`).waitFor(wait);
  await none(page, "a backup", page.getByRole("form", { name: "Back up now" }));
  await axe(page, "backups-member");
  await shots(page, "backups-member");

  await open(page, "/backups/runs/" + e.CAPSTAN_RUN, /^Backup of /);
  await page.getByRole("table", { name: "Manifest" }).waitFor(wait);
  await none(page, "a verification", page.getByRole("button", { name: "Verify now" }));
  await none(page, "a restore", page.getByRole("form", { name: "Restore" }));
  await none(page, "a deletion", page.getByRole("button", { name: "Delete the backup" }));
  await axe(page, "backup-run-member");

  await open(page, "/backups/policies", "Backups");
  await page.getByRole("table", { name: "Backup policies" }).waitFor(wait);
  await none(page, "editing policies", page.getByRole("button", { name: /^Edit / }));
  await axe(page, "backup-policies-member");

  await open(page, "/backups/storage", "Backups");
  await page.getByRole("heading", { name: "Where backups go" }).waitFor(wait);
  await none(page, "the settings' form", page.getByRole("form", { name: "Storage settings" }));
  await none(page, "a storage test", page.getByRole("form", { name: "Test the storage" }));
  await none(page, "the cloud drive", page.getByRole("heading", { name: "Cloud drive" }));
  if ((await page.content()).includes(e.CAPSTAN_S3_SECRET)) throw new Error("the storage secret is in a member's page");
  await axe(page, "backup-storage-member");
  await shots(page, "backup-storage-member");
  say("backups-read-only");
}, e.CAPSTAN_PAGES === "monitoring" ? "/monitoring" : "/backups");

// The backup screens' browser test, run by TestConsoleBackups
// (e2e/console_ops_test.go) against a real control plane, a real agent on
// the server CAPSTAN_SERVER, a real PostgreSQL database (instance
// CAPSTAN_INSTANCE, database CAPSTAN_DATABASE) and an S3 stand-in:
//
//   storage settings (a refused endpoint shows its field error; the key
//   pair is write-only) → test the storage from the server, step by step →
//   the instance's policy (a refused keep, then enabled with verify) →
//   back up now and watch the run succeed and be verified, live → the
//   run's detail with its manifest → restore into a new database →
//   replacing asks first, naming the database → delete it, confirmed.
//
// axe-core on every screen and state; screenshots in web/test-results/.
// Lines to the Go test: "run-succeeded RUN", "verified RUN",
// "restored DATABASE", "deleted RUN", and the steps.
import { axe, say, session, shots, wait } from "./lib.mjs";

const e = process.env;
const instance = e.CAPSTAN_INSTANCE;
const database = e.CAPSTAN_DATABASE;

await session(async (page) => {
  const navigations = [];
  page.on("framenavigated", (f) => f === page.mainFrame() && navigations.push(f.url()));

  // Storage: nothing set yet.
  const settings = page.getByRole("form", { name: "Storage settings" });
  await settings.waitFor(wait);
  await page.getByText("No storage is set yet").waitFor(wait);
  await axe(page, "backup-storage-empty");
  await shots(page, "backup-storage-empty");

  // A URL where a host is wanted: the field error next to the field.
  await settings.getByLabel("Endpoint", { exact: true }).fill("https://" + e.CAPSTAN_S3_ENDPOINT);
  await settings.getByLabel("Region", { exact: true }).fill(e.CAPSTAN_S3_REGION);
  await settings.getByLabel("Bucket", { exact: true }).fill(e.CAPSTAN_S3_BUCKET);
  await settings.getByLabel("Prefix", { exact: true }).fill("console");
  await settings.getByLabel("Access key id", { exact: true }).fill(e.CAPSTAN_S3_KEY);
  await settings.getByLabel("Secret access key", { exact: true }).fill(e.CAPSTAN_S3_SECRET);
  await settings.getByLabel("Bucket in the path").check();
  await settings.getByLabel("CA certificate (PEM)", { exact: true }).fill(e.CAPSTAN_S3_CA);
  await settings.getByRole("button", { name: "Save the storage settings" }).click();
  await page.locator("#endpoint-error").waitFor(wait);
  await axe(page, "backup-storage-error");
  await shots(page, "backup-storage-error");
  await settings.getByLabel("Endpoint", { exact: true }).fill(e.CAPSTAN_S3_ENDPOINT);
  await settings.getByRole("button", { name: "Save the storage settings" }).click();
  await settings.getByText("Saved.").waitFor(wait);
  // The key pair is write-only: stored, never shown again.
  await page.locator("#secret_access_key-hint", { hasText: "Stored (never shown)" }).waitFor(wait);
  if ((await settings.getByLabel("Secret access key", { exact: true }).inputValue()) !== "") throw new Error("the secret is shown after saving");
  if ((await page.content()).includes(e.CAPSTAN_S3_SECRET)) throw new Error("the secret is in the page");
  say("settings-saved");

  // Test the storage from the server: every step, with its time.
  const test = page.getByRole("form", { name: "Test the storage" });
  await test.getByLabel("From server").selectOption({ label: `${e.CAPSTAN_SERVER} (online)` });
  await test.getByRole("button", { name: "Test the storage" }).click();
  for (const step of ["write", "read", "list", "delete"]) await test.locator(`tr[data-step="${step}"] td.s-succeeded`).waitFor(wait);
  await test.locator(".badge", { hasText: "succeeded" }).waitFor(wait);
  say("storage-tested");
  await axe(page, "backup-storage");
  await shots(page, "backup-storage");

  // The policy: a refused keep, then enabled with verification.
  const sub = page.getByRole("navigation", { name: "Backups" });
  await sub.getByRole("link", { name: "Policies" }).click();
  const row = page.locator(`tr[data-policy="${instance}"]`);
  await row.waitFor(wait);
  await axe(page, "backup-policies");
  await row.getByRole("button", { name: `Edit the policy of ${instance}` }).click();
  const policy = page.getByRole("form", { name: `Policy of ${instance}` });
  await policy.getByLabel("Back up on a schedule").check();
  await policy.getByLabel("Keep", { exact: true }).fill("0");
  await policy.getByRole("button", { name: "Save the policy" }).click();
  await page.locator("#keep-error").waitFor(wait);
  await axe(page, "backup-policy-error");
  await shots(page, "backup-policy-form");
  await policy.getByLabel("Keep", { exact: true }).fill("3");
  await policy.getByLabel("Every (hours)", { exact: true }).fill("24");
  if (!(await policy.getByLabel("Verify every backup").isChecked())) throw new Error("verify is not on by default");
  await policy.getByRole("button", { name: "Save the policy" }).click();
  await policy.waitFor({ state: "detached", ...wait });
  await row.getByText("on", { exact: true }).waitFor(wait);
  say("policy-saved");
  await shots(page, "backup-policies");

  // Back up now: the run succeeds, then is verified, live.
  await sub.getByRole("link", { name: "Backups" }).click();
  const now = page.getByRole("form", { name: "Back up now" });
  await now.waitFor(wait);
  await page.getByText("No backups yet.").waitFor(wait);
  await axe(page, "backups-empty");
  await now.getByLabel("Instance").selectOption({ label: `${instance} (postgres)` });
  const before = navigations.length;
  await now.getByRole("button", { name: "Back up now" }).click();
  const run = page.locator("tr[data-run]").first();
  await run.locator(".badge.s-succeeded").waitFor(wait);
  const runID = await run.getAttribute("data-run");
  say("run-succeeded", runID);
  await run.locator(".badge.v-verified").waitFor(wait);
  if (navigations.length !== before) throw new Error("the page reloaded while the backup ran");
  say("verified", runID);
  await page.locator(`tr[data-instance]`).first().waitFor(wait);
  await axe(page, "backups");
  await shots(page, "backups");

  // A filter that excludes it.
  await page.getByLabel("Verification").selectOption("false");
  await page.getByText("No backup matches the filters.").waitFor(wait);
  await axe(page, "backups-filtered");
  await page.getByLabel("Verification").selectOption("");
  await run.waitFor(wait);

  // Its detail: the manifest, compared by the verification.
  await run.getByRole("link").click();
  await page.getByRole("heading", { name: `Backup of ${instance} / ${database}` }).waitFor(wait);
  const manifest = page.getByRole("table", { name: "Manifest" });
  await manifest.getByRole("cell", { name: "public.orders" }).waitFor(wait);
  await manifest.getByText("✓ matches").first().waitFor(wait);
  await axe(page, "backup-run");
  await shots(page, "backup-run");

  // Restore into a new database.
  const restore = page.getByRole("form", { name: "Restore" });
  const copy = database + "_copy";
  await restore.getByLabel("New database", { exact: true }).fill(copy);
  await restore.getByRole("button", { name: "Restore into a new database" }).click();
  await page.locator(".ok-note", { hasText: `Restored into ${copy}` }).waitFor(wait);
  say("restored", copy);
  await axe(page, "backup-run-restored");
  await shots(page, "backup-run-restored");

  // Replacing asks first, naming the database; kept.
  await restore.getByLabel("in place of a database").check();
  await restore.getByLabel("Database replaced", { exact: true }).fill(""); // the backup's own, by default
  await restore.getByRole("button", { name: "Replace the database" }).click();
  let dialog = page.getByRole("dialog");
  await dialog.getByRole("heading").waitFor(wait);
  if (!(await dialog.textContent()).includes(`Replace database ${database} on ${instance}?`))
    throw new Error("the confirmation does not name the database: " + (await dialog.textContent()));
  await axe(page, "backup-replace-confirm");
  await shots(page, "backup-replace-confirm");
  await dialog.getByRole("button", { name: "Keep it" }).click();
  await dialog.waitFor({ state: "detached", ...wait });

  // Delete it, confirmed: the page says it is gone.
  await page.getByRole("button", { name: "Delete the backup" }).click();
  dialog = page.getByRole("dialog");
  await dialog.getByRole("heading").waitFor(wait);
  if (!(await dialog.textContent()).includes(`Delete the backup of ${database} from`)) throw new Error("the confirmation does not name the backup");
  await axe(page, "backup-delete-confirm");
  await dialog.getByRole("button", { name: /^Delete the backup of / }).click();
  await page.getByText("This backup is gone").waitFor(wait);
  say("deleted", runID);
  await axe(page, "backup-run-gone");
}, "/backups/storage");

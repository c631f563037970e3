// The backup screens' paging, verification and cloud drive in a browser,
// run by TestConsoleFormsBackups (e2e/console_forms_test.go) against a
// real control plane whose cloud drive provider is the Google stand-in,
// a real agent and a real PostgreSQL database with one backup (CAPSTAN_RUN)
// and more than a page of older ones:
//
//   the list's first page → its older backups → "Verify now" on the
//   backup, verified live → connect the cloud drive through the
//   provider's consent and back → disconnect it, confirmed by name.
//
// axe-core on every state; screenshots in web/test-results/. Lines to the
// Go test: "paged N" (backups listed), "verified RUN", "drive-connected",
// "drive-disconnected".
import { axe, say, session, shots, wait } from "./lib.mjs";

const runID = process.env.CAPSTAN_RUN;
const email = process.env.CAPSTAN_DRIVE_EMAIL;

await session(
  async (page) => {
    const navigations = [];
    page.on("framenavigated", (f) => f === page.mainFrame() && navigations.push(f.url()));

    // A page of 50, then the older ones: none twice, the newest first.
    const rows = page.getByRole("table", { name: "Backups", exact: true }).locator("tbody tr");
    await page.waitForFunction(() => document.querySelectorAll("tr[data-run]").length === 50, null, wait);
    if ((await rows.first().getAttribute("data-run")) !== runID) throw new Error("the newest backup is not first");
    await axe(page, "backups-first-page");
    const more = page.getByRole("button", { name: "Older backups" });
    await more.click();
    await more.waitFor({ state: "detached", ...wait });
    const ids = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-run")));
    if (new Set(ids).size !== ids.length) throw new Error("a backup is listed twice after paging");
    const sorted = [...ids].sort().reverse();
    if (ids.join() !== sorted.join()) throw new Error("the backups are not newest first after paging");
    await axe(page, "backups-older");
    await shots(page, "backups-older");
    say("paged", String(ids.length));

    // Verify now: the badge turns verified without a reload.
    await page.locator(`tr[data-run="${runID}"]`).getByRole("link").click();
    await page.getByRole("heading", { name: /^Backup of pg-forms/ }).waitFor(wait);
    const badge = page.locator(".row .badge[class*=' v-']").first();
    if (/v-verified/.test((await badge.getAttribute("class")) ?? "")) throw new Error("the backup shows verified before it was");
    await axe(page, "backup-run-unverified");
    const before = navigations.length;
    await page.getByRole("button", { name: "Verify now" }).click();
    await page.locator(".row .badge.v-verified").waitFor(wait);
    await page.getByText("✓ matches").first().waitFor(wait);
    if (navigations.length !== before) throw new Error("the page reloaded while verifying: " + navigations.slice(before).join(", "));
    await axe(page, "backup-run-verified");
    await shots(page, "backup-run-verified");
    say("verified", runID);

    // The cloud drive: connect through the provider's consent; its page
    // leads back to the storage, which shows the account connected.
    await page.getByRole("link", { name: "← Backups" }).click();
    await page.getByRole("navigation", { name: "Backups" }).getByRole("link", { name: "Storage" }).click();
    const card = page.locator(".card", { has: page.getByRole("heading", { name: "Cloud drive" }) });
    await card.getByText("not connected").waitFor(wait);
    await axe(page, "drive-not-connected");
    await card.getByRole("button", { name: "Connect a drive" }).click();
    await page.getByRole("heading", { name: "Cloud drive connected" }).waitFor(wait);
    if (!(await page.textContent("body")).includes(email)) throw new Error("the landing page does not name the account");
    await axe(page, "drive-landing");
    await page.getByRole("link", { name: "Back to the backup storage" }).click();
    await card.getByText(email).waitFor(wait);
    await card.locator(".badge", { hasText: "connected" }).waitFor(wait);
    await axe(page, "drive-connected");
    await shots(page, "drive-connected");
    say("drive-connected");

    // Disconnect: the confirmation names the account.
    await card.getByRole("button", { name: "Disconnect" }).click();
    const dialog = page.getByRole("dialog");
    await dialog.getByRole("heading").waitFor(wait);
    const asked = await dialog.textContent();
    if (!asked.includes(`Disconnect ${email}?`)) throw new Error("the confirmation does not name the account: " + asked);
    await axe(page, "drive-disconnect-confirm");
    await shots(page, "drive-disconnect-confirm");
    await dialog.getByRole("button", { name: `Disconnect ${email}` }).click();
    await dialog.waitFor({ state: "detached", ...wait });
    await card.getByText("not connected").waitFor(wait);
    await axe(page, "drive-disconnected");
    say("drive-disconnected");
  },
  "/backups",
  { ignoreHTTPSErrors: true },
);

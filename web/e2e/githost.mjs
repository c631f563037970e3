// The git host connection's browser test, run by TestConsoleGitHost
// (e2e/console_githost_test.go) against a real control plane whose git
// host is the GitHub stand-in (HTTPS on loopback, with a certificate of
// the test's own CA):
//
//   the Applications screen, not connected → a field error → connect: the
//   console posts the manifest to the stand-in, which creates the app and
//   sends the browser back; the console completes it → install the app
//   on the stand-in's page, which returns through the setup path; the
//   console records the installation → the used code again, refused →
//   the git source picker lists the stand-in's repositories → a member
//   sees no connect control and is refused → disconnect, confirmed.
//
// axe-core runs on every state; screenshots go to web/test-results/.
// Lines on stdout report to the Go test, which checks each step through
// the API.
import { axe, env, launch, say, session, shots, signIn, wait, watchPage } from "./lib.mjs";

const repo = process.env.CAPSTAN_REPO;
const hidden = process.env.CAPSTAN_HIDDEN_REPO;
const member = {
  email: process.env.CAPSTAN_MEMBER_EMAIL,
  password: process.env.CAPSTAN_MEMBER_PASSWORD,
  secret: process.env.CAPSTAN_MEMBER_TOTP_SECRET,
};

// hold makes the console's calls to path wait until the returned release
// is called, so that the state shown meanwhile can be checked.
async function hold(page, path) {
  let release;
  const gate = new Promise((r) => (release = r));
  await page.route((u) => u.pathname === path, async (route) => {
    await gate;
    await route.continue();
  });
  return async () => {
    release();
    await page.unroute((u) => u.pathname === path);
  };
}

const card = (page, state) => page.locator(`.githost-state[data-githost="${state}"]`);

await session(
  async (page) => {
    await page.getByRole("heading", { name: "Applications" }).waitFor(wait);
    await card(page, "not-connected").waitFor(wait);
    await axe(page, "githost-not-connected");
    await shots(page, "githost-not-connected");

    // A bad organization: the error next to its field, nothing posted.
    await page.getByLabel("Organization (optional)").fill("not an org!");
    await page.getByRole("button", { name: "Connect a GitHub App" }).click();
    await page.locator("#gh-organization-error").waitFor(wait);
    if (!page.url().startsWith(env.url)) throw new Error("a refused manifest left the console");
    await axe(page, "githost-field-error");
    say("field-error");
    await page.getByLabel("Organization (optional)").fill("");

    // Connect: the console posts the manifest to the stand-in (the CSP
    // lets the form go there), which creates the app and sends the
    // browser back to the console's return route.
    const release = await hold(page, "/api/v1/githost/manifest/complete");
    await page.getByRole("button", { name: "Connect a GitHub App" }).click();
    await page.waitForURL((u) => u.pathname === "/githost/manifest/callback", wait);
    const callback = page.url();
    if (!new URL(callback).searchParams.get("code")) throw new Error(`the stand-in returned no code: ${callback}`);
    await page.locator('.githost-return[data-step="manifest"][data-state="working"]').waitFor(wait);
    await page.getByRole("heading", { name: "Connecting the GitHub App" }).waitFor(wait);
    await axe(page, "githost-connecting");
    await shots(page, "githost-connecting");
    await release();
    await page.waitForURL((u) => u.pathname === "/applications" && u.searchParams.get("githost") === "connected", wait);
    await card(page, "connected").waitFor(wait);
    await page.locator(".githost-notice").waitFor(wait);
    await page.getByText("Not installed anywhere yet").waitFor(wait);
    await axe(page, "githost-connected");
    await shots(page, "githost-connected");
    say("connected");

    // Install on the stand-in's page; it returns through the setup path.
    const releaseSetup = await hold(page, "/api/v1/githost/installations");
    await page.getByRole("link", { name: "Install on an account" }).click();
    await page.getByRole("heading", { name: /^Install / }).waitFor(wait);
    await page.getByRole("button", { name: "Install" }).click();
    await page.waitForURL((u) => u.pathname === "/githost/setup", wait);
    const installation = new URL(page.url()).searchParams.get("installation_id");
    await page.locator('.githost-return[data-step="setup"][data-state="working"]').waitFor(wait);
    await axe(page, "githost-recording");
    await releaseSetup();
    await page.waitForURL((u) => u.pathname === "/applications" && u.searchParams.get("githost") === "installed", wait);
    await page.locator(`tr[data-installation="${installation}"]`).waitFor(wait);
    await axe(page, "githost-installed");
    await shots(page, "githost-installed");
    say("installed", installation);

    // The provider's code works once: the same return again is refused,
    // with the problem's title and detail.
    await page.goto(callback);
    await page.locator('.githost-return[data-step="manifest"][data-state="failed"]').waitFor(wait);
    await page.getByRole("heading", { name: "The GitHub App was not connected" }).waitFor(wait);
    const text = await page.locator(".githost-return .problem").innerText();
    if (!/state/.test(text)) throw new Error(`the refused return says: ${text}`);
    await axe(page, "githost-failed");
    await shots(page, "githost-failed");
    await page.goto(env.url + "/githost/setup?setup_action=install");
    await page.getByRole("heading", { name: "The installation was not recorded" }).waitFor(wait);
    await page.getByText("without an installation id").waitFor(wait);
    await axe(page, "githost-no-installation");
    await page.goto(env.url + "/githost/setup?setup_action=request");
    await page.getByRole("heading", { name: "Installation requested" }).waitFor(wait);
    await axe(page, "githost-requested");
    say("failed-shown");

    // The git source picker lists the installation's repositories.
    await page.getByRole("link", { name: "Back to Applications" }).click();
    await page.getByRole("link", { name: "New application" }).click();
    await page.getByRole("heading", { name: "New application" }).waitFor(wait);
    await page.getByRole("radio", { name: "Git repository" }).check();
    const picker = page.getByLabel("Repository", { exact: true });
    await picker.locator("option", { hasText: repo }).waitFor({ state: "attached", ...wait });
    const names = await picker.locator("option").allInnerTexts();
    if (names.some((n) => n.includes(hidden))) throw new Error(`the picker lists ${hidden}, which the installation cannot read`);
    await picker.selectOption({ label: names.find((n) => n.includes(repo)) });
    await page.getByLabel("Branch", { exact: true }).locator("option", { hasText: "main (" }).waitFor({ state: "attached", ...wait });
    await axe(page, "githost-repositories");
    await shots(page, "githost-repositories");
    say("repos-listed", names.filter((n) => n.includes("/")).length);

    // A member: no git host card, no connect control, and the return
    // route is refused by the API.
    const browser = await launch();
    const problems = [];
    try {
      const mp = await (await browser.newContext({ viewport: { width: 1280, height: 720 } })).newPage();
      await watchPage(mp, problems);
      await signIn(mp, "/applications", member);
      await mp.getByRole("heading", { name: "Applications" }).waitFor(wait);
      await mp.locator("table[aria-label='Applications']").waitFor(wait);
      for (const [what, n] of [
        ["the git host card", await mp.locator(".githost-state").count()],
        ["a connect button", await mp.getByRole("button", { name: "Connect a GitHub App" }).count()],
        ["an install link", await mp.getByRole("link", { name: "Install on an account" }).count()],
      ])
        if (n) throw new Error(`a member sees ${what}`);
      await mp.goto(`${env.url}/githost/setup?installation_id=${installation}&setup_action=install`);
      await mp.getByRole("heading", { name: "The installation was not recorded" }).waitFor(wait);
      await mp.locator(".githost-return .problem").getByText(/administrator/i).waitFor(wait);
      await axe(mp, "githost-member-refused");
      await shots(mp, "githost-member-refused");
      if (problems.length) throw new Error("member page problems:\n" + problems.join("\n"));
      say("member-refused");
    } finally {
      await browser.close();
    }

    // Disconnecting asks first, naming the app, and then links the app's
    // settings on the git host, where it is deleted.
    await page.goto(env.url + "/applications");
    await card(page, "connected").waitFor(wait);
    const appName = await page.locator(".githost-state a").first().innerText();
    await page.getByRole("button", { name: "Disconnect…" }).click();
    const dialog = page.getByRole("dialog", { name: "Disconnect the git host app" });
    await dialog.getByText(appName).first().waitFor(wait);
    await axe(page, "githost-disconnect-confirm");
    await shots(page, "githost-disconnect-confirm");
    await dialog.getByRole("button", { name: `Disconnect ${appName}` }).click();
    await card(page, "not-connected").waitFor(wait);
    await page.getByRole("link", { name: "Delete the app on the git host" }).waitFor(wait);
    await axe(page, "githost-disconnected");
    say("disconnected");
  },
  "/applications",
  // The stand-in's certificate is signed by the test's own CA.
  { ignoreHTTPSErrors: true },
);

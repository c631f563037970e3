// Helpers of the console's browser tests: Chromium from the system
// (playwright-core downloads no browser), TOTP codes, axe-core and
// screenshots.
import { createHmac } from "node:crypto";
import { mkdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
export const outDir = resolve(process.env.CAPSTAN_SCREENSHOTS ?? join(here, "..", "test-results"));

// Flags for a headless Chromium on a machine with no network beyond
// loopback: no background traffic, no component updates.
export const chromiumArgs = [
  "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
];

export async function launch() {
  const executablePath = process.env.CAPSTAN_TEST_CHROMIUM || "/usr/bin/chromium";
  return chromium.launch({ executablePath, args: chromiumArgs });
}

function base32(s) {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  let bits = "";
  for (const c of s.replace(/=+$/, "").toUpperCase()) {
    const v = alphabet.indexOf(c);
    if (v < 0) throw new Error("bad base32");
    bits += v.toString(2).padStart(5, "0");
  }
  const out = [];
  for (let i = 0; i + 8 <= bits.length; i += 8) out.push(parseInt(bits.slice(i, i + 8), 2));
  return Buffer.from(out);
}

// totp is the RFC 6238 code (SHA-1, 6 digits, 30 s) of secret at time ms.
export function totp(secret, ms = Date.now()) {
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(Math.floor(ms / 1000 / 30)));
  const h = createHmac("sha1", base32(secret)).update(counter).digest();
  const o = h[h.length - 1] & 0xf;
  const n = ((h[o] & 0x7f) << 24) | (h[o + 1] << 16) | (h[o + 2] << 8) | h[o + 3];
  return String(n % 1_000_000).padStart(6, "0");
}

const axeSource = readFileSync(join(here, "..", "node_modules", "axe-core", "axe.min.js"), "utf8");

// axe runs axe-core in the page (evaluated through the debugging
// protocol, which the page's CSP does not govern) and fails on any
// serious or critical violation.
export async function axe(page, screen) {
  await page.evaluate(axeSource);
  const res = await page.evaluate(async () => {
    const r = await globalThis.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(" ")).slice(0, 5) }));
  });
  const bad = res.filter((v) => v.impact === "serious" || v.impact === "critical");
  if (bad.length) throw new Error(`axe on ${screen}: ${JSON.stringify(bad, null, 2)}`);
  return res.length;
}

// shots saves the page as it is in light and dark, then at phone size.
export async function shots(page, screen) {
  mkdirSync(outDir, { recursive: true });
  const size = page.viewportSize();
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.screenshot({ path: join(outDir, `${screen}-${scheme}.png`) });
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: join(outDir, `${screen}-phone.png`) });
  // The phone view must not scroll sideways.
  const overflow = await page.evaluate(() => {
    const w = document.documentElement.clientWidth;
    const over = document.documentElement.scrollWidth - w;
    const wide = [...document.querySelectorAll("body *")]
      .filter((e) => e.getBoundingClientRect().right > w + 1 && !e.closest(".scroll-x"))
      .slice(-3)
      .map((e) => `${e.tagName.toLowerCase()}.${e.className} (${Math.round(e.getBoundingClientRect().right)} px)`);
    return { over, wide };
  });
  if (overflow.over > 1) throw new Error(`${screen}: at 390 px the page is ${overflow.over} px wider than the screen: ${overflow.wide.join(", ")}`);
  await page.setViewportSize(size);
}

// watchPage records CSP violations and page errors, to fail on.
export async function watchPage(page, problems) {
  await page.addInitScript(() => {
    document.addEventListener("securitypolicyviolation", (e) => {
      console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  page.on("console", (m) => {
    if (m.type() === "error" && /CSP violation|Content Security Policy/.test(m.text())) problems.push(m.text());
  });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
}

// expectTitle waits until the document title is want.
export async function expectTitle(page, want) {
  try {
    await page.waitForFunction((w) => document.title === w, want, { timeout: 30_000 });
  } catch {
    throw new Error(`the title is "${await page.title()}", not "${want}"`);
  }
}

// oneRowNav fails unless the header's navigation is one row high: no
// link sits below the first, and the header is no taller than its
// tallest item.
export async function oneRowNav(page) {
  const m = await page.evaluate(() => {
    const nav = document.querySelector(".top nav");
    const links = [...nav.querySelectorAll("a")].map((a) => a.getBoundingClientRect());
    const items = [...document.querySelector(".top").children].map((e) => e.getBoundingClientRect()).filter((r) => r.height > 0);
    const top = document.querySelector(".top");
    const pad = parseFloat(getComputedStyle(top).paddingTop) + parseFloat(getComputedStyle(top).paddingBottom);
    return {
      width: innerWidth,
      nav: nav.getBoundingClientRect().height,
      link: Math.max(...links.map((r) => r.height)),
      rows: new Set(links.map((r) => Math.round(r.top))).size,
      header: top.getBoundingClientRect().height - pad,
      tallest: Math.max(...items.map((r) => r.height)),
      itemRows: new Set(items.map((r) => Math.round(r.top + r.height / 2))).size,
    };
  });
  if (m.rows !== 1 || m.nav > m.link + 1 || m.header > m.tallest + 2 || m.itemRows !== 1)
    throw new Error(`at ${m.width} px the header is not one row: ${JSON.stringify(m)}`);
  return m;
}

export function say(...parts) {
  process.stdout.write(parts.join(" ") + "\n");
}

// The environment every browser test gets from its Go test.
export const env = {
  url: process.env.CAPSTAN_URL,
  email: process.env.CAPSTAN_EMAIL,
  password: process.env.CAPSTAN_PASSWORD,
  secret: process.env.CAPSTAN_TOTP_SECRET,
};

export const wait = { timeout: 90_000 };

// signIn signs in through the form with a computed TOTP code, starting at
// path (default the fleet), and waits until the console is live there;
// who is the test's administrator unless given ({email, password, secret}).
export async function signIn(page, path = "/servers", who = env) {
  await page.goto(env.url + path);
  await page.getByLabel("E-mail").waitFor(wait);
  await page.getByLabel("E-mail").fill(who.email);
  await page.getByLabel("Password").fill(who.password);
  await page.getByRole("button", { name: "Continue" }).click();
  await page.getByLabel("Code from your authenticator app").fill(totp(who.secret));
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL((u) => !u.pathname.startsWith("/sign-in"), wait);
  await page.getByText("Live", { exact: false }).first().waitFor(wait);
}

// session runs fn with a signed-in page at 1280×720 and fails when the
// page had a CSP violation or a script error; the browser is closed
// whatever happens. contextOptions are Playwright's browser context
// options, added to the viewport.
export async function session(fn, path, contextOptions = {}) {
  const browser = await launch();
  const problems = [];
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 720 }, ...contextOptions });
    const page = await context.newPage();
    await watchPage(page, problems);
    await signIn(page, path);
    await fn(page);
    if (problems.length) throw new Error("page problems:\n" + problems.join("\n"));
    say("done");
  } finally {
    await browser.close();
  }
}

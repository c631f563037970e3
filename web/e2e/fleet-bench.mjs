// Measures the fleet page in headless Chromium against a running control
// plane with many servers (enrolled by capstan-fleetsim): its first render
// (from navigation start, and from the page's own start of the fleet
// screen to the rows on screen) and the frame times while scrolling the
// whole list. It signs in as a user whose TOTP secret it is given.
//
//   CAPSTAN_URL=http://127.0.0.1:8080 CAPSTAN_EMAIL=… CAPSTAN_PASSWORD=… \
//   CAPSTAN_TOTP_SECRET=… node e2e/fleet-bench.mjs
//
// The figures with 10,000 servers, on a machine doing nothing else:
//   1. `make build` (with the console), and
//      `go build -o bin/capstan-fleetsim ./cmd/capstan-fleetsim`.
//   2. A fresh data directory: `capstan migrate`, then two administrators
//      with `capstan user create --email … --admin --password-stdin --json`
//      (each prints its TOTP secret): one for the simulator, one for the
//      browser (a TOTP code is accepted once).
//   3. `capstan serve --data-dir … --listen 127.0.0.1:PORT`, and against it
//      `capstan-fleetsim --url … --email … --agents 10000 --ramp 1m
//      --duration 3m --heartbeat 10s --metrics 15s` (password and secret in
//      CAPSTAN_FLEETSIM_PASSWORD and CAPSTAN_FLEETSIM_TOTP_SECRET; it makes
//      its own enrollment tokens).
//   4. Once the ramp is over (the simulator's progress shows every agent
//      enrolled), this script with CAPSTAN_RUNS=5 from web/. It prints the
//      runs, median and max of both first renders, the scroll frame
//      p50/p95/max, the servers request and the JavaScript loaded.
import { launch, totp } from "./lib.mjs";

const url = process.env.CAPSTAN_URL;
const runs = Number(process.env.CAPSTAN_RUNS ?? 5);
const browser = await launch();
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 720 } });
  const page = await context.newPage();
  await page.goto(url + "/sign-in");
  await page.getByLabel("E-mail").fill(process.env.CAPSTAN_EMAIL);
  await page.getByLabel("Password").fill(process.env.CAPSTAN_PASSWORD);
  await page.getByRole("button", { name: "Continue" }).click();
  await page.getByLabel("Code from your authenticator app").fill(totp(process.env.CAPSTAN_TOTP_SECRET));
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(url + "/", { timeout: 60_000 });

  const loads = [];
  for (let i = 0; i < runs; i++) {
    // A reload: the console boots, renews its token from the refresh
    // cookie, fetches every server and renders the visible rows.
    await page.goto(url + "/servers");
    await page.waitForFunction(() => performance.getEntriesByName("capstan:fleet-first-render").length > 0, null, { timeout: 60_000 });
    loads.push(
      await page.evaluate(() => {
        const m = performance.getEntriesByName("capstan:fleet-first-render")[0];
        const done = performance.getEntriesByName("capstan:fleet-rendered")[0];
        const rows = document.querySelectorAll(".tbody .tr").length;
        const count = document.querySelector(".counts span")?.textContent;
        // The fleet's list: the compact one, or the full one of older builds.
        const api = performance.getEntriesByType("resource").filter((e) => /\/api\/v1\/servers(\/compact)?$/.test(new URL(e.name).pathname)).pop();
        return {
          fromNavigation: done.startTime, fetchAndRender: m.duration, rows, count,
          apiMs: api ? api.responseEnd - api.startTime : null, apiBytes: api ? api.encodedBodySize : null,
          apiJSONBytes: api ? api.decodedBodySize : null, apiPath: api ? new URL(api.name).pathname : null,
          afterResponse: api ? done.startTime - api.responseEnd : null,
          // The JavaScript the page loaded, as sent (gzip) and unpacked.
          jsBytes: performance.getEntriesByType("resource").filter((e) => new URL(e.name).pathname.endsWith(".js")).reduce((n, e) => n + e.encodedBodySize, 0),
          jsFiles: performance.getEntriesByType("resource").filter((e) => new URL(e.name).pathname.endsWith(".js")).length,
        };
      }),
    );
  }
  // Scroll the whole list, a step per frame, recording frame intervals.
  const frames = await page.evaluate(async () => {
    const box = document.querySelector(".tbody");
    const out = [];
    let last = performance.now();
    const steps = 600;
    for (let i = 1; i <= steps; i++) {
      box.scrollTop = (box.scrollHeight * i) / steps;
      await new Promise((r) => requestAnimationFrame(() => r()));
      const now = performance.now();
      out.push(now - last);
      last = now;
    }
    return out;
  });
  const sorted = [...frames].sort((a, b) => a - b);
  const q = (p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const figures = (xs) => ({ runs: xs.map(Math.round), median: Math.round(med(xs)), max: Math.round(Math.max(...xs)) });
  console.log(JSON.stringify({
    servers: loads[0].count,
    rowsRendered: loads[0].rows,
    firstRenderFromNavigationMs: figures(loads.map((l) => l.fromNavigation)),
    fetchAndRenderMs: figures(loads.map((l) => l.fetchAndRender)),
    firstLoadJS: { files: loads[0].jsFiles, bytes: loads[0].jsBytes },
    serversRequestMs: {
      path: loads[0].apiPath, runs: loads.map((l) => Math.round(l.apiMs)), median: Math.round(med(loads.map((l) => l.apiMs))),
      bytes: loads[0].apiBytes, jsonBytes: loads[0].apiJSONBytes,
    },
    renderAfterResponseMs: { runs: loads.map((l) => Math.round(l.afterResponse)), median: Math.round(med(loads.map((l) => l.afterResponse))) },
    scrollFrameMs: { frames: frames.length, p50: +q(0.5).toFixed(1), p95: +q(0.95).toFixed(1), max: +sorted[sorted.length - 1].toFixed(1) },
  }, null, 2));
} finally {
  await browser.close();
}

// The application create form's browser test, run by TestConsoleFormsApps
// (e2e/console_forms_test.go) against a real control plane whose git host
// (the GitHub stand-in) is connected, with the repository CAPSTAN_REPO
// installed, and a real agent on the server CAPSTAN_SERVER:
//
//   every kind and source shows its own fields only → a compose
//   application refused (its document's field error) then created, posting
//   nothing of the other kinds → a service application refused (its
//   commands' field errors) then created from a repository and branch
//   picked from the git host's lists.
//
// axe-core on every state; screenshots in web/test-results/. Lines to the
// Go test: "created KIND APP" for each application created.
import { axe, env, say, session, shots, wait } from "./lib.mjs";

const server = process.env.CAPSTAN_SERVER;
const repo = process.env.CAPSTAN_REPO;

// The form's fields by what they are, to see which ones a state shows.
const fields = {
  image: (p) => p.getByRole("textbox", { name: "Image", exact: true }),
  repository: (p) => p.getByLabel("Repository", { exact: true }),
  branch: (p) => p.getByLabel("Branch", { exact: true }),
  dockerfile: (p) => p.getByLabel("Dockerfile", { exact: true }),
  buildContext: (p) => p.getByLabel("Build context", { exact: true }),
  buildSecrets: (p) => p.getByRole("group", { name: "Build secrets", exact: true }),
  compose: (p) => p.getByRole("textbox", { name: "Compose document", exact: true }),
  composeFile: (p) => p.getByLabel("Compose file", { exact: true }),
  webService: (p) => p.getByLabel("Web service", { exact: true }),
  startCommand: (p) => p.getByLabel("Start command", { exact: true }),
  buildCommand: (p) => p.getByLabel("Build command", { exact: true }),
  buildTimeout: (p) => p.getByLabel("Build time limit (seconds)", { exact: true }),
  port: (p) => p.getByLabel("Container port", { exact: true }),
  autoDeploy: (p) => p.getByLabel("Deploy every push to the branch"),
};

// expectFields fails unless the form shows exactly the fields named.
async function expectFields(page, state, shown) {
  for (const [name, field] of Object.entries(fields)) {
    const n = await field(page).count();
    if (shown.includes(name) && n !== 1) throw new Error(`${state}: the ${name} field is not shown`);
    if (!shown.includes(name) && n !== 0) throw new Error(`${state}: the ${name} field is shown`);
  }
  await axe(page, "app-new-" + state);
}

const kind = (page, name) => page.getByRole("radio", { name, exact: true });

// The bodies the form posted, to see that one kind's carries nothing of
// another's.
const posted = [];

// expectBody fails when the last body posted has a field outside allowed,
// or a source with fields of another type.
function expectBody(what, allowed, source) {
  const body = posted.at(-1);
  if (!body) throw new Error(`${what}: nothing posted`);
  const extra = Object.keys(body).filter((k) => !allowed.includes(k));
  if (extra.length) throw new Error(`${what}: the form posted ${extra.join(", ")} of another kind: ${JSON.stringify(body)}`);
  const srcExtra = Object.keys(body.source ?? {}).filter((k) => !source.includes(k));
  if (srcExtra.length) throw new Error(`${what}: the source posted has ${srcExtra.join(", ")}: ${JSON.stringify(body.source)}`);
}

async function chooseServer(page) {
  const select = page.getByLabel("Server", { exact: true });
  await select.locator("option", { hasText: server }).waitFor({ state: "attached", ...wait });
  await select.selectOption({ label: `${server} (online)` });
}

// recordPosts keeps, in the page, the body of every create request (the
// browser's own request events carry no body of a fetch of a Request).
function recordPosts() {
  globalThis.__posted = [];
  const f = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    if (input instanceof Request && input.method === "POST" && new URL(input.url).pathname === "/api/v1/applications")
      globalThis.__posted.push(await input.clone().text());
    return f(input, init);
  };
}

// submit posts the form, keeps the body it posted and fails unless the
// answer has the status wanted.
async function submit(page, status) {
  const before = await page.evaluate(() => globalThis.__posted.length);
  const answer = page.waitForResponse((r) => r.request().method() === "POST" && new URL(r.url()).pathname === "/api/v1/applications", wait);
  await page.getByRole("button", { name: "Create the application" }).click();
  await page.waitForFunction((n) => globalThis.__posted.length > n, before, wait);
  posted.push(JSON.parse(await page.evaluate(() => globalThis.__posted.at(-1))));
  const r = await answer;
  if (r.status() !== status) throw new Error(`create: ${r.status()} ${await r.text()}, want ${status}; posted ${JSON.stringify(posted.at(-1))}`);
}

await session(async (page) => {
  await page.addInitScript(recordPosts);
  await page.goto(env.url + "/applications/new");
  await page.getByRole("heading", { name: "New application" }).waitFor(wait);
  await chooseServer(page);

  // Every kind and source: its own fields only. Values typed into one
  // stay in the form but are not posted for another.
  await expectFields(page, "container-image", ["image", "port"]);
  await fields.image(page).fill("nginx:alpine");
  await fields.port(page).fill("80");
  await page.getByRole("radio", { name: "Git repository" }).check();
  await repository(page).waitFor(wait);
  await expectFields(page, "container-git", ["repository", "branch", "dockerfile", "buildContext", "buildSecrets", "port", "autoDeploy"]);
  await fields.dockerfile(page).fill("Dockerfile.prod");
  await shots(page, "app-new-container-git");
  await kind(page, "Compose stack").check();
  await expectFields(page, "compose-git", ["repository", "branch", "composeFile", "webService", "port", "autoDeploy"]);
  await fields.composeFile(page).fill("deploy/compose.yaml");
  await kind(page, "Service").check();
  await expectFields(page, "service", ["repository", "branch", "startCommand", "buildCommand", "buildTimeout", "autoDeploy"]);
  if ((await page.getByRole("group", { name: "Source" }).count()) !== 0) throw new Error("a service offers a choice of source");
  await fields.startCommand(page).fill("./run.sh");
  await kind(page, "Compose stack").check();
  await page.getByRole("radio", { name: "Compose document" }).check();
  await expectFields(page, "compose-inline", ["compose", "webService", "port"]);
  await shots(page, "app-new-compose");
  say("kinds-switched");

  // A compose application: a key the server does not run is refused next
  // to the document; nothing is created.
  await page.getByLabel("Name", { exact: true }).fill("shop-stack");
  const doc = "services:\n  web:\n    image: nginx:alpine\n";
  await fields.compose(page).fill(doc + "    privileged: true\n");
  await fields.webService(page).fill("web");
  await page.getByRole("button", { name: "Add environment variable" }).click();
  await page.getByLabel("Environment variables: name 1").fill("MODE");
  await page.getByLabel("Environment variables: value of MODE").fill("production");
  await page.getByLabel("Deploy it now").uncheck();
  await submit(page, 422);
  const composeError = page.locator("#app-compose-error");
  await composeError.waitFor(wait);
  if (!/privileged/.test(await composeError.textContent())) throw new Error("the compose error does not name the key: " + (await composeError.textContent()));
  expectBody("compose", ["name", "server_id", "kind", "deploy", "source", "container_port", "env", "web_service", "compose"], ["type"]);
  await axe(page, "app-new-compose-error");
  await shots(page, "app-new-compose-error");
  say("compose-errors");
  await fields.compose(page).fill(doc);
  await submit(page, 201);
  await page.waitForURL(/\/applications\/app_[^/]+$/, wait);
  await page.getByRole("heading", { name: "shop-stack" }).waitFor(wait);
  expectBody("compose", ["name", "server_id", "kind", "deploy", "source", "container_port", "env", "web_service", "compose"], ["type"]);
  say("created", "compose", page.url().split("/").pop());

  // While the console has no stream (it says it is reconnecting), the
  // header still fits a phone.
  const stream = (u) => u.pathname === "/api/v1/stream";
  await page.route(stream, (r) => r.abort());
  await page.goto(env.url + "/applications/new");
  await page.getByRole("heading", { name: "New application" }).waitFor(wait);
  await page.locator(".live:not(.s-live)").waitFor(wait);
  await shots(page, "app-new-reconnecting");
  await page.unroute(stream);

  // A service application from the git host's repository and branch, after
  // its commands' field errors.
  await chooseServer(page);
  await fields.port(page).fill("8080");
  await fields.image(page).fill("nginx:alpine");
  await kind(page, "Service").check();
  await page.getByText("GitHub App").waitFor(wait);
  const repos = repository(page);
  await repos.locator("option", { hasText: repo }).waitFor({ state: "attached", ...wait });
  const listed = await repos.locator("option").allTextContents();
  if (!listed.some((o) => o.endsWith("(private)"))) throw new Error("the private repository is not listed: " + listed.join(", "));
  await repos.selectOption({ label: repo });
  const branches = fields.branch(page);
  await branches.locator("option", { hasText: "release (bbbbbbb)" }).waitFor({ state: "attached", ...wait });
  const names = (await branches.locator("option").allTextContents()).sort();
  if (names.join(",") !== "main (aaaaaaa),release (bbbbbbb)") throw new Error("branches listed: " + names.join(", "));
  if ((await branches.inputValue()) !== "main") throw new Error("the repository's default branch is not chosen first");
  await branches.selectOption("release");
  await axe(page, "app-new-service-git");
  await page.getByLabel("Name", { exact: true }).fill("shop-api");
  await fields.buildCommand(page).fill("make");
  await fields.buildTimeout(page).fill("99999");
  await page.getByLabel("Deploy it now").uncheck();
  await submit(page, 422);
  await page.locator("#app-start_command-error").waitFor(wait);
  await page.locator("#app-build_timeout_seconds-error").waitFor(wait);
  const serviceBody = ["name", "server_id", "kind", "deploy", "source", "auto_deploy", "start_command", "build_command", "build_timeout_seconds"];
  expectBody("service", serviceBody, ["type", "installation_id", "repo_id", "branch"]);
  await axe(page, "app-new-service-error");
  await shots(page, "app-new-service-error");
  say("service-errors");
  await fields.startCommand(page).fill("./bin/api");
  await fields.buildTimeout(page).fill("600");
  await submit(page, 201);
  await page.waitForURL(/\/applications\/app_[^/]+$/, wait);
  await page.getByRole("heading", { name: "shop-api" }).waitFor(wait);
  expectBody("service", serviceBody, ["type", "installation_id", "repo_id", "branch"]);
  say("created", "service", page.url().split("/").pop());
}, "/applications/new");

function repository(page) {
  return fields.repository(page);
}

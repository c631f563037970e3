import { describe, expect, it } from "vitest";
import {
  certLeft, concernsApp, concernsDeployment, createBody, emptyForm, envChange, envFieldErrors, envRows, parsePublish, patchBody, publishText,
  releaseName, settingsForm, rollbackObject, sourcesOf, trafficSeries, unapplied, withKind,
} from "./apps";

describe("createBody", () => {
  it("sends an image application's fields and leaves defaults to the API", () => {
    const f = { ...emptyForm("srv_1"), name: " web ", image: " nginx:1 ", container_port: "8080",
      env: [{ key: "A", value: "1" }, { key: " ", value: "dropped" }] };
    expect(createBody(f)).toEqual({ name: "web", server_id: "srv_1", kind: "container", deploy: true,
      source: { type: "image", image: "nginx:1" }, container_port: 8080, env: [{ key: "A", value: "1" }] });
  });

  it("sends a git source with its build settings and auto-deploy", () => {
    const f = { ...emptyForm("srv_1"), name: "api", source: "git" as const, installation_id: "7", repo_id: "42", branch: "main",
      dockerfile: "docker/Dockerfile", build_args: [{ key: "VERSION", value: "1" }], build_secrets: [{ key: " NPM_TOKEN ", value: "s" }, { key: "", value: "x" }],
      container_port: "3000", auto_deploy: true };
    expect(createBody(f)).toMatchObject({ source: { type: "git", installation_id: 7, repo_id: 42, branch: "main" },
      auto_deploy: true, dockerfile: "docker/Dockerfile", build_args: [{ key: "VERSION", value: "1" }], build_secrets: [{ key: "NPM_TOKEN", value: "s" }] });
    expect(createBody(f)).not.toHaveProperty("build_context");
  });

  it("sends a compose document inline, or a compose file from git", () => {
    const inline = { ...withKind(emptyForm("s"), "compose"), name: "stack", compose: "services: {}", web_service: "web", container_port: "80" };
    expect(inline.source).toBe("inline");
    expect(createBody(inline)).toMatchObject({ kind: "compose", source: { type: "inline" }, compose: "services: {}", web_service: "web" });
    const git = { ...inline, source: "git" as const, compose_file: "deploy/compose.yaml" };
    const b = createBody(git);
    expect(b).toMatchObject({ compose_file: "deploy/compose.yaml" });
    expect(b).not.toHaveProperty("compose");
  });

  it("sends a service application's commands, never a container port", () => {
    const f = { ...withKind(emptyForm("s"), "service"), name: "svc", start_command: "./run", build_timeout_seconds: "60", container_port: "1" };
    expect(f.source).toBe("git");
    const b = createBody(f);
    expect(b).toMatchObject({ kind: "service", start_command: "./run", build_timeout_seconds: 60 });
    expect(b).not.toHaveProperty("container_port");
    expect(b).not.toHaveProperty("build_command");
  });

  it("keeps a number it cannot read, for the API to name", () => {
    expect(Number.isNaN(createBody({ ...emptyForm(), container_port: "eighty" }).container_port)).toBe(true);
  });
});

describe("sources", () => {
  it("lists each kind's sources and keeps a source the new kind takes", () => {
    expect(sourcesOf("service")).toEqual(["git"]);
    expect(withKind({ ...emptyForm(), source: "git" }, "compose").source).toBe("git");
    expect(withKind({ ...emptyForm(), source: "image" }, "compose").source).toBe("inline");
  });
});

describe("envChange", () => {
  it("sets replaced and new values, removes, and ignores untouched rows", () => {
    const rows = envRows(["A", "B", "C"]);
    rows[0].value = "new-a";
    rows[1].remove = true;
    rows.push({ key: " D ", existing: false, value: "d", remove: false });
    rows.push({ key: "E", existing: false, value: "e", remove: true });
    rows.push({ key: "", existing: false, value: "x", remove: false });
    expect(envChange(rows)).toEqual({ set: [{ key: "A", value: "new-a" }, { key: "D", value: "d" }], remove: ["B"] });
  });

  it("is null when nothing changes", () => {
    expect(envChange(envRows(["A"]))).toBeNull();
  });

  it("sets an empty value when asked to", () => {
    const rows = envRows(["A"]);
    rows[0].value = "";
    expect(envChange(rows)).toEqual({ set: [{ key: "A", value: "" }], remove: [] });
  });

  it("maps the API's field errors to the rows they name", () => {
    const body = { set: [{ key: "A", value: "" }, { key: "1B", value: "" }], remove: ["GONE"] };
    expect(envFieldErrors([{ field: "body.set[1].key", message: "bad" }, { field: "remove[0]", message: "absent" },
      { field: "set", message: "too many" }], body)).toEqual({ "1B": ["bad"], GONE: ["absent"], "": ["too many"] });
  });
});

describe("releases", () => {
  const d = { id: "dep_1", created_at: "2026-01-01T00:00:00Z", spec: { image: "web:v1" } };
  it("names a release by its commit, its ref or its image", () => {
    expect(releaseName(d)).toBe("web:v1");
    expect(releaseName({ ...d, ref: "web:v2" })).toBe("web:v2");
    expect(releaseName({ ...d, spec: { image: "capstan/x:abc", git: { commit_sha: "abcdef0123", repository: "acme/x" } } })).toBe("acme/x@abcdef0");
    expect(rollbackObject(d)).toContain("web:v1 (deployment dep_1, ");
  });
});

describe("stream messages", () => {
  it("finds a deployment's job, before and after it has one", () => {
    expect(concernsDeployment({ id: "job_1" }, { id: "dep_1", job_id: "job_1" })).toBe(true);
    expect(concernsDeployment({ id: "job_2", type: "app.deploy", payload: { deployment_id: "dep_1" } }, { id: "dep_1", job_id: null })).toBe(true);
    expect(concernsDeployment({ id: "job_2", type: "app.deploy", payload: { deployment_id: "dep_9" } }, { id: "dep_1", job_id: null })).toBe(false);
  });

  it("finds an application's events and jobs", () => {
    const app = { id: "app_1", server_id: "srv_1" };
    expect(concernsApp("event", { type: "deploy.succeeded", payload: { application_id: "app_1" } }, app)).toBe(true);
    expect(concernsApp("event", { type: "deploy.succeeded", payload: { application_id: "app_2" } }, app)).toBe(false);
    expect(concernsApp("job", { server_id: "srv_1", type: "app.deploy", payload: { app_id: "app_1" } }, app)).toBe(true);
    expect(concernsApp("job", { server_id: "srv_1", type: "app.deploy", payload: { app_id: "app_2" } }, app)).toBe(false);
    // A member's job messages carry no payload: any deploy on the server.
    expect(concernsApp("job", { server_id: "srv_1", type: "app.deploy", payload: null }, app)).toBe(true);
    expect(concernsApp("job", { server_id: "srv_2", type: "app.deploy" }, app)).toBe(false);
    expect(concernsApp("job", { server_id: "srv_1", type: "container.restart" }, app)).toBe(false);
  });
});

describe("traffic and certificates", () => {
  it("makes chart columns of traffic points", () => {
    const s = trafficSeries([{ t: "2026-01-01T00:00:00Z", count: 3, status_2xx: 2, status_3xx: 0, status_4xx: 1, status_5xx: 0,
      bytes_out: 10, p95_ms: null }]);
    expect(s.t).toEqual([Date.parse("2026-01-01T00:00:00Z") / 1000]);
    expect(s.requests.map((r) => r.values[0])).toEqual([3, 2, 1, 0]);
    expect(s.p95[0].values).toEqual([null]);
  });

  it("says how long a certificate has left", () => {
    const now = Date.parse("2026-01-01T00:00:00Z");
    expect(certLeft(null, now)).toBe("no certificate");
    expect(certLeft("2025-12-31T00:00:00Z", now)).toBe("expired");
    expect(certLeft("2026-01-01T05:30:00Z", now)).toBe("5 h left");
    expect(certLeft("2026-01-01T00:10:00Z", now)).toBe("1 h left");
    expect(certLeft("2026-01-31T00:00:00Z", now)).toBe("30 d left");
  });
});

describe("published ports", () => {
  it("reads a port, or bind:port, and writes bind:port", () => {
    expect(parsePublish(" ")).toBeUndefined();
    expect(parsePublish("8081")).toEqual({ host_port: 8081 });
    expect(parsePublish("0.0.0.0:9000")).toEqual({ host_port: 9000, bind: "0.0.0.0" });
    expect(parsePublish("[::1]:9000")).toEqual({ host_port: 9000, bind: "::1" });
    expect(parsePublish("::1")?.host_port).toBeNaN();
    expect(parsePublish("x")?.host_port).toBeNaN();
    expect(publishText({ host_port: 8081 })).toBe("127.0.0.1:8081");
    expect(publishText({ host_port: 8081, bind: "::" })).toBe("[::]:8081");
    expect(publishText(null)).toBe("");
  });
  it("sends publish on create and changes or removes it on patch", () => {
    expect(createBody({ ...emptyForm("srv_1"), image: "a", container_port: "80", publish: "8081" }).publish).toEqual({ host_port: 8081 });
    expect(createBody({ ...emptyForm("srv_1"), image: "a", container_port: "80" })).not.toHaveProperty("publish");
    const a = { name: "web", kind: "container" as const, source: { type: "image" as const, image: "web:v1" }, container_port: 8080,
      health_path: "/", memory_limit: "", auto_deploy: false, publish: { host_port: 8081, bind: "127.0.0.1" } };
    const f = settingsForm(a);
    expect(f.publish).toBe("127.0.0.1:8081");
    expect(patchBody(a, f)).toBeNull();
    expect(patchBody(a, { ...f, publish: "0.0.0.0:8081" })).toEqual({ publish: { host_port: 8081, bind: "0.0.0.0" } });
    expect(patchBody(a, { ...f, publish: "" })).toEqual({ publish: { host_port: 0 } });
  });
});

describe("patchBody", () => {
  const app = { name: "web", kind: "container" as const, source: { type: "image" as const, image: "web:v1" }, container_port: 8080,
    health_path: "/", memory_limit: "", auto_deploy: false };
  it("sends only what changed", () => {
    const f = settingsForm(app);
    expect(patchBody(app, f)).toBeNull();
    expect(patchBody(app, { ...f, image: " web:v2 ", container_port: "9090" })).toEqual({ image: "web:v2", container_port: 9090 });
  });
  it("changes a git application's branch through its source", () => {
    const g = { ...app, source: { type: "git" as const, installation_id: 1, repo_id: 2, branch: "main" } };
    expect(patchBody(g, { ...settingsForm(g), branch: "next" })).toEqual({ source: { type: "git", installation_id: 1, repo_id: 2, branch: "next" } });
  });
  it("sends a service application's commands, never its port", () => {
    const s = { ...app, kind: "service" as const, source: { type: "git" as const, installation_id: 1, repo_id: 2, branch: "main" }, container_port: 0,
      service: { start_command: "./run", build_command: "", build_timeout_seconds: 900 } };
    expect(patchBody(s, { ...settingsForm(s), start_command: "./serve", build_timeout_seconds: "60", container_port: "1" }))
      .toEqual({ start_command: "./serve", build_timeout_seconds: 60 });
  });
});

describe("unapplied", () => {
  const app = { kind: "container", source: { type: "image" }, image: "web:2", container_port: 9090, health_path: "/health", memory_limit: "" };
  const live = { spec: { image: "web:1", container_port: 8080, health_path: "/health", memory_limit: "" } };
  it("lists what the live release does not run with after a failed deployment", () => {
    expect(unapplied(app, live, { id: "dep_2", status: "failed" }, "dep_1")).toEqual([
      { label: "Image", live: "web:1", set: "web:2" },
      { label: "Port", live: "8080", set: "9090" },
    ]);
  });
  it("lists nothing when the latest deployment is live or did not fail", () => {
    expect(unapplied(app, live, { id: "dep_1", status: "failed" }, "dep_1")).toEqual([]);
    expect(unapplied(app, live, { id: "dep_2", status: "running" }, "dep_1")).toEqual([]);
    expect(unapplied(app, null, { id: "dep_2", status: "failed" }, null)).toEqual([]);
  });
  it("does not count an image the live release took from its own ref", () => {
    expect(unapplied(app, { ...live, ref: "web:1" }, { id: "dep_2", status: "failed" }, "dep_1")).toEqual([
      { label: "Port", live: "8080", set: "9090" },
    ]);
  });
});

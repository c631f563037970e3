import { describe, expect, it } from "vitest";
import { manifestForm, manifestReturn, once, setupReturn } from "./githost";

const q = (s: string) => new URLSearchParams(s);

describe("git host returns", () => {
  it("reads the code and state after the app was created", () => {
    expect(manifestReturn(q("code=abc&state=s_1"))).toEqual({ code: "abc", state: "s_1" });
    for (const bad of ["", "code=abc", "state=s", "code=&state=s"]) {
      const r = manifestReturn(q(bad));
      expect("problem" in r && r.problem.title).toBe("No app was created");
    }
  });
  it("reads the installation after the app was installed", () => {
    expect(setupReturn(q("installation_id=42&setup_action=install"))).toEqual({ installation_id: 42, setup_action: "install" });
    expect(setupReturn(q("installation_id=42&setup_action=update"))).toEqual({ installation_id: 42, setup_action: "update" });
    expect(setupReturn(q("installation_id=7"))).toEqual({ installation_id: 7, setup_action: "install" });
    expect(setupReturn(q("setup_action=request"))).toEqual({ requested: true });
    for (const bad of ["", "installation_id=0", "installation_id=-3", "installation_id=x1", "installation_id=1e3",
      "installation_id=99999999999999999"]) {
      const r = setupReturn(q(bad + "&setup_action=install"));
      expect("problem" in r && r.problem.title, bad).toBe("No installation");
    }
    const r = setupReturn(q("installation_id=5&setup_action=delete"));
    expect("problem" in r && r.problem.detail).toContain('"delete"');
  });
});

describe("the manifest form", () => {
  it("posts the manifest as the field manifest to the provider's page", () => {
    type El = Record<string, unknown> & { children: El[]; appendChild: (c: El) => void };
    const doc = {
      createElement: (tag: string): El => {
        const el: El = { tag, children: [], appendChild: (c: El) => void el.children.push(c) };
        return el;
      },
    } as unknown as Document;
    const f = manifestForm(doc, "https://git.example/settings/apps/new?state=s", { name: "Capstan", url: "https://c" }) as unknown as El;
    expect(f.tag).toBe("form");
    expect(f.method).toBe("post");
    expect(f.action).toBe("https://git.example/settings/apps/new?state=s");
    expect(f.children).toHaveLength(1);
    expect(f.children[0]).toMatchObject({ tag: "input", type: "hidden", name: "manifest" });
    expect(JSON.parse(f.children[0].value as string)).toEqual({ name: "Capstan", url: "https://c" });
  });
});

describe("once", () => {
  it("runs a step once per key", async () => {
    let n = 0;
    const run = async () => ++n;
    const [a, b] = await Promise.all([once("k1", run), once("k1", run)]);
    expect([a, b, n]).toEqual([1, 1, 1]);
    expect(await once("k2", run)).toBe(2);
  });
});

// The git host connection's own logic, kept pure for the unit tests:
// reading what the provider put in the address when it sends the browser
// back, and the form that posts the app manifest to the provider.

import type { Problem } from "./problem";

function problem(title: string, detail: string): Problem {
  return { title, status: 0, detail };
}

// manifestReturn reads the code and state the provider returns after
// creating the app, or says why there is nothing to complete.
export function manifestReturn(q: URLSearchParams): { code: string; state: string } | { problem: Problem } {
  const code = q.get("code") ?? "";
  const state = q.get("state") ?? "";
  if (!code || !state)
    return {
      problem: problem(
        "No app was created",
        "The git host sent the browser back without a code and a state. Start again from the Applications screen.",
      ),
    };
  return { code, state };
}

export type SetupReturn =
  | { installation_id: number; setup_action: "install" | "update" }
  | { requested: true }
  | { problem: Problem };

// setupReturn reads the installation the provider returns after the app
// was installed (or its installation changed). A requested installation
// waits for an owner of the account to approve it: there is nothing to
// record yet.
export function setupReturn(q: URLSearchParams): SetupReturn {
  const action = q.get("setup_action") ?? "install";
  if (action === "request") return { requested: true };
  const raw = q.get("installation_id") ?? "";
  const id = /^[0-9]{1,18}$/.test(raw) ? Number(raw) : 0;
  if (!Number.isSafeInteger(id) || id < 1)
    return {
      problem: problem(
        "No installation",
        "The git host sent the browser back without an installation id. Install the app on the git host, then come back.",
      ),
    };
  if (action !== "install" && action !== "update")
    return { problem: problem("Unknown setup step", `The git host sent the browser back after "${action}", which Capstan does not know.`) };
  return { installation_id: id, setup_action: action };
}

// manifestForm builds the form that posts the manifest, as the form field
// "manifest", to the provider's page: the provider creates the app and
// sends the browser back with a code.
export function manifestForm(doc: Document, postURL: string, manifest: unknown): HTMLFormElement {
  const form = doc.createElement("form");
  form.method = "post";
  form.action = postURL;
  form.hidden = true;
  const field = doc.createElement("input");
  field.type = "hidden";
  field.name = "manifest";
  field.value = JSON.stringify(manifest);
  form.appendChild(field);
  return form;
}

// once runs each step of a return at most once per page, whatever
// renders ask for it: the provider's code and an installation's return
// are used once.
const runs = new Map<string, Promise<unknown>>();
export function once<T>(key: string, run: () => Promise<T>): Promise<T> {
  let p = runs.get(key) as Promise<T> | undefined;
  if (!p) {
    p = run();
    runs.set(key, p);
  }
  return p;
}

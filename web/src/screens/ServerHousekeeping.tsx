import { useEffect, useState } from "preact/hooks";
import { api, ok, type Schemas } from "../api/client";
import { Confirm, ProblemBox, Table } from "../components/ui";
import { bytes } from "../lib/format";
import { finished } from "../lib/jobs";
import { asProblem, type Problem } from "../lib/problem";

type Job = Schemas["Job"];

// What a docker.prune job answers (agentproto.DockerPruneResult).
export interface PruneResult {
  dry_run: boolean;
  images: { id: string; tags: string[]; size_bytes: number }[];
  networks: { id: string; name: string; driver: string }[];
  reclaim_bytes: number;
  kept: { id: string; tags: string[]; reason: "application" | "in_use" }[];
  skipped: { id: string; reason: string }[];
}

// runAction queues a server action and reads its job until it finishes
// (each read waits up to 30 s for it).
export async function runAction(serverId: string, type: string, payload: Record<string, unknown>): Promise<Job> {
  const res = await ok(api.POST("/api/v1/servers/{id}/actions", { params: { path: { id: serverId } }, body: { type, payload } }));
  let job = res.job;
  while (!finished(job.status)) {
    job = await ok(api.GET("/api/v1/jobs/{id}", { params: { path: { id: job.id }, query: { wait: 30 } } }));
  }
  if (job.status !== "succeeded") throw new Error(`${type} ${job.status}${job.error ? ": " + job.error : ""}`);
  return job;
}

export const shortId = (id: string) => id.replace(/^sha256:/, "").slice(0, 12);

const count = (n: number, noun: string) => `${n} ${noun}${n === 1 ? "" : "s"}`;

const tagsOf = (tags: string[]) => (tags.length ? tags.join(", ") : "untagged");

// Prune removes the images and networks nothing uses, in two steps: a dry
// run lists them (and what is kept, and why), then the administrator
// confirms exactly that list.
export function Prune({ serverId, onDone }: { serverId: string; onDone: () => void }) {
  const [plan, setPlan] = useState<PruneResult | null>(null);
  const [result, setResult] = useState<PruneResult | null>(null);
  const [busy, setBusy] = useState<"" | "listing" | "removing">("");
  const [problem, setProblem] = useState<Problem | null>(null);

  async function list() {
    setProblem(null);
    setResult(null);
    setBusy("listing");
    try {
      const job = await runAction(serverId, "docker.prune", { dry_run: true });
      setPlan(job.data as PruneResult);
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setBusy("");
    }
  }

  async function remove(p: PruneResult) {
    setPlan(null);
    setBusy("removing");
    try {
      const job = await runAction(serverId, "docker.prune", {
        image_ids: p.images.map((i) => i.id),
        network_ids: p.networks.map((n) => n.id),
      });
      setResult(job.data as PruneResult);
      onDone();
    } catch (err) {
      setProblem(asProblem(err));
    } finally {
      setBusy("");
    }
  }

  const nothing = plan && plan.images.length + plan.networks.length === 0;
  return (
    <div class="card" data-prune>
      <div class="row wrap between">
        <h2>Clean up</h2>
        <button type="button" onClick={() => void list()} disabled={busy !== ""}>
          {busy === "listing" ? "Looking…" : busy === "removing" ? "Removing…" : "Prune unused images and networks"}
        </button>
      </div>
      <p class="muted">
        Lists the images no container uses and no application keeps for its releases, and the networks no container is attached to,
        before removing anything. Volumes are never pruned: they hold data.
      </p>
      <ProblemBox problem={problem} />
      {nothing && <p data-prune-result>Nothing to remove: every image is used or kept ({plan.kept.length}), and no network is unused.</p>}
      {result && (
        <p data-prune-result>
          Removed {count(result.images.length, "image")} ({bytes(result.reclaim_bytes)}) and {count(result.networks.length, "network")}
          {result.skipped.length > 0 && `; ${result.skipped.length} skipped: ${result.skipped.map((s) => `${shortId(s.id)} (${s.reason})`).join(", ")}`}.
        </p>
      )}
      {plan && !nothing && (
        <Confirm title="Prune Docker" action="Remove" object={`${count(plan.images.length, "image")} and ${count(plan.networks.length, "network")}`}
          onCancel={() => setPlan(null)} onConfirm={() => void remove(plan)}>
          <p>
            Frees up to <strong>{bytes(plan.reclaim_bytes)}</strong>. Only what is listed here is removed; anything used by then is kept.
          </p>
          <div class="scroll-y" tabIndex={0} role="region" aria-label="What the prune removes">
            <Table label="Images to remove" columns={["Image", "ID", "Size"]}>
              {plan.images.map((im) => (
                <tr key={im.id} data-prune-image={im.id}>
                  <td>{tagsOf(im.tags)}</td>
                  <td><code>{shortId(im.id)}</code></td>
                  <td>{bytes(im.size_bytes)}</td>
                </tr>
              ))}
            </Table>
            {plan.networks.length > 0 && (
              <Table label="Networks to remove" columns={["Network", "Driver"]}>
                {plan.networks.map((n) => (
                  <tr key={n.id} data-prune-network={n.name}>
                    <td>{n.name}</td>
                    <td>{n.driver}</td>
                  </tr>
                ))}
              </Table>
            )}
          </div>
          <p class="muted">
            Kept: {plan.kept.filter((k) => k.reason === "application").length} images of the applications' releases,{" "}
            {plan.kept.filter((k) => k.reason === "in_use").length} used by containers.
          </p>
        </Confirm>
      )}
    </div>
  );
}

// What container.inspect answers.
interface InspectResult {
  container: string;
  id: string;
  inspect: unknown;
}

// Inspection shows a container's inspect document (environment values
// hidden by the agent).
export function Inspection({ serverId, container, onClose }: { serverId: string; container: string; onClose: () => void }) {
  const [doc, setDoc] = useState<InspectResult | null>(null);
  const [problem, setProblem] = useState<Problem | null>(null);
  useEffect(() => {
    let live = true;
    setDoc(null);
    setProblem(null);
    runAction(serverId, "container.inspect", { container })
      .then((j) => live && setDoc(j.data as InspectResult))
      .catch((err) => live && setProblem(asProblem(err)));
    return () => {
      live = false;
    };
  }, [serverId, container]);
  return (
    <div class="card" data-inspect={container}>
      <div class="row wrap between">
        <h2>Inspect {container}</h2>
        <button type="button" onClick={onClose}>Close</button>
      </div>
      <ProblemBox problem={problem} />
      {!doc && !problem && <p class="muted">Inspecting…</p>}
      {doc && (
        <>
          <p class="muted">Environment values are hidden: applications keep their secrets there.</p>
          <pre class="inspect" tabIndex={0} aria-label={`Inspect document of ${container}`}>{JSON.stringify(doc.inspect, null, 2)}</pre>
        </>
      )}
    </div>
  );
}

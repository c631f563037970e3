import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import type { Schemas } from "../api/client";
import { Table } from "../components/ui";
import { Inspection, Prune, shortId } from "./ServerHousekeeping";
import { bytes, rate as byteRate } from "../lib/format";
import { Ago } from "../components/Ago";

type Detail = Schemas["ServerDetail"];
type ContainerSample = Schemas["ContainerSample"];

// cpuShare shows a container's CPU share of the host with one decimal, so
// that a mostly idle container does not read 0%.
export function cpuShare(v: number | null | undefined): string {
  if (v == null) return "–";
  return v < 10 ? `${v.toFixed(1)}%` : `${Math.round(v)}%`;
}

// rate shows bytes per second in decimal units (kB/s, MB/s), as the
// charts do.
export function rate(v: number | null | undefined): string {
  return byteRate(v);
}

// unknown shows -1 (the agent could not tell) as a dash.
const known = (n: number, show: (n: number) => string = String) => (n < 0 ? "–" : show(n));

// ServerContainers is the containers tab of a server: each container with
// its CPU, memory and network at the newest metric sample (running ones
// only), and the engine's images, volumes and networks with their sizes.
// For administrators (actions given): each container's actions and its
// inspection, and the prune.
export function ServerContainers({ srv, actions, reload }: { srv: Detail; actions?: (name: string) => ComponentChildren; reload?: () => void }) {
  const [inspecting, setInspecting] = useState("");
  const inv = srv.inventory;
  const stats = new Map<string, ContainerSample>();
  for (const c of srv.container_metrics?.containers ?? []) stats.set(c.id, c);
  const images = inv?.images ?? [];
  return (
    <>
      <div class="card scroll-x">
        <Table label="Containers" columns={["Name", "Image", "State", "Restarts", "CPU", "Memory", "Network in / out", !!actions && "Actions"]}
          empty={!inv?.containers?.length && "No containers reported."}>
          {(inv?.containers ?? []).map((c) => {
            const s = stats.get(c.id);
            return (
              <tr key={c.id} data-container={c.name}>
                <td>{c.name}</td>
                <td>{c.image}</td>
                <td>
                  {c.state} <span class="muted">{c.status}</span>
                </td>
                <td>{c.restart_count}</td>
                <td data-stat="cpu">{cpuShare(s?.cpu_percent)}</td>
                <td data-stat="memory">
                  {s ? (
                    <>
                      {bytes(s.memory_used)} <span class="muted">of {bytes(s.memory_limit)}</span>
                    </>
                  ) : (
                    "–"
                  )}
                </td>
                <td data-stat="network">{s ? `${rate(s.net_rx_bytes_per_s)} / ${rate(s.net_tx_bytes_per_s)}` : "–"}</td>
                {actions && (
                  <td>
                    <div class="actions">
                      {actions(c.name)}
                      <button type="button" aria-label={`Inspect ${c.name}`} onClick={() => setInspecting(c.name)}>
                        Inspect
                      </button>
                    </div>
                  </td>
                )}
              </tr>
            );
          })}
        </Table>
        {srv.container_metrics && <p class="muted">CPU, memory and network as of <Ago at={srv.container_metrics.at} />.</p>}
      </div>
      {actions && inspecting && <Inspection serverId={srv.id} container={inspecting} onClose={() => setInspecting("")} />}
      <div class="card scroll-x">
        <h2>Images</h2>
        <Table label="Images" columns={["Tags", "ID", "Size", "Created"]}
          empty={!images.length && (inv?.images == null ? "The agent reports no images." : "No images.")}>
          {images.map((im) => (
            <tr key={im.id} data-image={im.id}>
              <td>{im.tags?.length ? im.tags.join(", ") : <span class="muted">untagged</span>}</td>
              <td>
                <code>{shortId(im.id)}</code>
              </td>
              <td>{bytes(im.size_bytes)}</td>
              <td><Ago at={im.created} /></td>
            </tr>
          ))}
        </Table>
      </div>
      <div class="card scroll-x">
        <h2>Volumes</h2>
        <Table label="Volumes" columns={["Name", "Driver", "Size", "Containers"]}
          empty={!inv?.volumes?.length && (inv?.volumes == null ? "The agent reports no volumes." : "No volumes.")}>
          {(inv?.volumes ?? []).map((v) => (
            <tr key={v.name} data-volume={v.name}>
              <td>{v.name}</td>
              <td>{v.driver}</td>
              <td>{known(v.size_bytes, bytes)}</td>
              <td>{known(v.containers)}</td>
            </tr>
          ))}
        </Table>
        {!!inv?.volumes?.length && <p class="muted">Sizes are measured every 5 minutes.</p>}
      </div>
      <div class="card scroll-x">
        <h2>Networks</h2>
        <Table label="Networks" columns={["Name", "Driver", "Scope", "Containers"]}
          empty={!inv?.networks?.length && (inv?.networks == null ? "The agent reports no networks." : "No networks.")}>
          {(inv?.networks ?? []).map((n) => (
            <tr key={n.id} data-network={n.name}>
              <td>{n.name}</td>
              <td>{n.driver}</td>
              <td>{n.scope}</td>
              <td>{known(n.containers)}</td>
            </tr>
          ))}
        </Table>
      </div>
      {actions && <Prune serverId={srv.id} onDone={() => reload?.()} />}
    </>
  );
}

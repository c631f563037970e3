import type { ComponentChildren } from "preact";
import type { Schemas } from "../api/client";
import { Table } from "../components/ui";
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

// ServerContainers is the containers tab of a server: each container with
// its CPU, memory and network at the newest metric sample (running ones
// only), and the engine's images with their sizes.
export function ServerContainers({ srv, actions }: { srv: Detail; actions?: (name: string) => ComponentChildren }) {
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
                {actions && <td>{actions(c.name)}</td>}
              </tr>
            );
          })}
        </Table>
        {srv.container_metrics && <p class="muted">CPU, memory and network as of <Ago at={srv.container_metrics.at} />.</p>}
      </div>
      <div class="card scroll-x">
        <h2>Images</h2>
        <Table label="Images" columns={["Tags", "ID", "Size", "Created"]}
          empty={!images.length && (inv?.images == null ? "The agent reports no images." : "No images.")}>
          {images.map((im) => (
            <tr key={im.id} data-image={im.id}>
              <td>{im.tags?.length ? im.tags.join(", ") : <span class="muted">untagged</span>}</td>
              <td>
                <code>{im.id.replace(/^sha256:/, "").slice(0, 12)}</code>
              </td>
              <td>{bytes(im.size_bytes)}</td>
              <td><Ago at={im.created} /></td>
            </tr>
          ))}
        </Table>
      </div>
    </>
  );
}

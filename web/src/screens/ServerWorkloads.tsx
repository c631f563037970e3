import { api, ok } from "../api/client";
import { Link, ProblemBox, Table } from "../components/ui";
import { useResource } from "../lib/resource";

// ServerWorkloads lists the applications and databases on one server,
// each linking to its own screen.
export function ServerWorkloads({ id }: { id: string }) {
  const res = useResource(async () => {
    const [apps, dbs] = await Promise.all([ok(api.GET("/api/v1/applications")), ok(api.GET("/api/v1/databases"))]);
    return {
      apps: (apps.applications ?? []).filter((a) => a.server_id === id),
      dbs: (dbs.databases ?? []).filter((d) => d.server_id === id),
    };
  }, [id]);
  if (res.problem) return <ProblemBox problem={res.problem} />;
  const data = res.data;
  return (
    <div class="grid2">
      <div class="card scroll-x">
        <h2>Applications</h2>
        <Table label="Applications on this server" columns={["Name", "Kind"]}
          empty={data && !data.apps.length && "No applications on this server."}>
          {(data?.apps ?? []).map((a) => (
            <tr key={a.id} data-app={a.name}>
              <td>
                <Link href={"/applications/" + a.id}>{a.name}</Link>
              </td>
              <td>{a.kind}</td>
            </tr>
          ))}
        </Table>
      </div>
      <div class="card scroll-x">
        <h2>Databases</h2>
        <Table label="Databases on this server" columns={["Name", "Engine", "State"]}
          empty={data && !data.dbs.length && "No databases on this server."}>
          {(data?.dbs ?? []).map((d) => (
            <tr key={d.id} data-database={d.name}>
              <td>
                <Link href={"/databases/" + d.id}>{d.name}</Link>
              </td>
              <td>{d.engine}</td>
              <td>{d.state}</td>
            </tr>
          ))}
        </Table>
      </div>
    </div>
  );
}

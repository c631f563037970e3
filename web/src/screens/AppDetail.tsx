import { api, ok } from "../api/client";
import { BackLink, Loading, ProblemBox, StatusBadge, SubNav } from "../components/ui";
import { concernsApp } from "../lib/apps";
import { currentUser } from "../lib/auth";
import { useLive } from "../lib/live";
import { useResource } from "../lib/resource";
import { AppDomains, AppTraffic } from "./AppDomains";
import { sourceText } from "./Apps";
import { DeploymentList } from "./Deployments";
import "./apps.css";
import { Overview } from "./app/Overview";
import { EnvEditor } from "./app/Env";
import { AppLogs } from "./app/Logs";
import { Settings } from "./app/Settings";
import { useTitle } from "../lib/title";

const tabs = [
  { id: "", label: "Overview" },
  { id: "deployments", label: "Deployments" },
  { id: "env", label: "Environment" },
  { id: "logs", label: "Logs", admin: true },
  { id: "domains", label: "Domains" },
  { id: "traffic", label: "Traffic" },
  { id: "settings", label: "Settings", admin: true },
];

// AppDetail is one application: its status and live deployment, its
// deployments, environment, logs, domains, traffic and settings, each
// section at its own address (/applications/ID/deployments…).
export function AppDetail({ id, tab = "" }: { id: string; tab?: string }) {
  const res = useResource(() => ok(api.GET("/api/v1/applications/{id}", { params: { path: { id }, query: { reveal: false } } })), [id]);
  const app = res.data;
  const admin = currentUser()?.admin ?? false;
  useTitle(tabs.find((t) => t.id && t.id === tab)?.label, app?.name, "Applications");
  useLive(
    ["event", "job"],
    (data, type) => {
      if (type === "reset") return void res.reload();
      if (app && concernsApp(type, data, app) && (type === "event" || data.status !== "running")) void res.reload();
    },
    [app?.id, app?.server_id],
  );
  if (!app) return res.problem ? <ProblemBox problem={res.problem} /> : <Loading what="the application" />;
  const shown = tabs.filter((t) => !t.admin || admin);
  const current = shown.some((t) => t.id === tab) ? tab : "";
  return (
    <section class="apps">
      <BackLink href="/applications" label="Applications" />
      <div class="row wrap">
        <h1>{app.name}</h1>
        <StatusBadge status={app.status} />
        <span class="tag">{app.kind}</span>
        <span class="muted apps-source">{sourceText(app)}</span>
      </div>
      <ProblemBox problem={res.problem} />
      <SubNav label="Application sections"
        items={shown.map((t) => ({ href: `/applications/${id}${t.id ? "/" + t.id : ""}`, label: t.label, current: t.id === current }))} />
      {current === "" && <Overview app={app} reload={res.reload} />}
      {current === "deployments" && <DeploymentList app={app} onChange={() => void res.reload()} />}
      {current === "env" && <EnvEditor app={app} onSaved={(d) => res.set(() => d)} />}
      {current === "logs" && <AppLogs app={app} />}
      {current === "domains" && <AppDomains app={app} />}
      {current === "traffic" && <AppTraffic app={app} />}
      {current === "settings" && <Settings app={app} onSaved={(d) => res.set(() => d)} />}
    </section>
  );
}

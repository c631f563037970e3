import { useEffect, useState } from "preact/hooks";
import { whenSignInRequired } from "./api/client";
import { Link } from "./components/ui";
import { currentUser, onAuthChange, refresh } from "./lib/auth";
import { alias, match, navigate, useLocation } from "./lib/router";
import { SignIn } from "./screens/SignIn";
import { Fleet } from "./screens/Fleet";
import { NotFound } from "./screens/NotFound";
import { signOut } from "./screens/signout";
import { Enroll } from "./screens/Enroll";
import { lazy } from "./components/lazy";
import { JobDetail, Jobs } from "./screens/Jobs";
import { stream } from "./lib/stream";
import { useStreamState } from "./lib/live";
import { loadUnread, setUnread, useUnread } from "./lib/inbox";
import { HelpButton, Shortcuts } from "./components/Shortcuts";
import { manifestReturnPath, setupReturnPath } from "./lib/paths";

const ServerDetail = lazy(() => import("./screens/Server").then((m) => m.ServerDetail), "the server");
const Alerts = lazy(() => import("./screens/Monitoring").then((m) => m.Alerts), "alerts");
const Rules = lazy(() => import("./screens/Monitoring").then((m) => m.Rules), "alert rules");
const Databases = lazy(() => import("./screens/Databases").then((m) => m.Databases), "databases");
const NewDatabase = lazy(() => import("./screens/Databases").then((m) => m.NewDatabase), "the form");
const DatabaseDetail = lazy(() => import("./screens/Database").then((m) => m.DatabaseDetail), "the instance");
const BackupRuns = lazy(() => import("./screens/backups/Runs").then((m) => m.Runs), "backups");
const BackupRun = lazy(() => import("./screens/backups/RunDetail").then((m) => m.RunDetail), "the backup");
const BackupPolicies = lazy(() => import("./screens/backups/Policies").then((m) => m.Policies), "backup policies");
const BackupStorage = lazy(() => import("./screens/backups/Storage").then((m) => m.Storage), "backup storage");
const Inbox = lazy(() => import("./screens/Inbox").then((m) => m.Inbox), "the inbox");
const Notifications = lazy(() => import("./screens/Notifications").then((m) => m.Notifications), "the notification settings");
const ChannelDetail = lazy(() => import("./screens/Notifications").then((m) => m.ChannelDetail), "the channel");
const Audit = lazy(() => import("./screens/Audit").then((m) => m.Audit), "the audit log");
const Platform = lazy(() => import("./screens/Platform").then((m) => m.Platform), "the platform");
const Users = lazy(() => import("./screens/Users").then((m) => m.Users), "users");
const Tokens = lazy(() => import("./screens/Tokens").then((m) => m.Tokens), "API tokens");
const Apps = lazy(() => import("./screens/Apps").then((m) => m.Apps), "applications");
const AppNew = lazy(() => import("./screens/Apps").then((m) => m.AppNew), "the form");
const AppDetail = lazy(() => import("./screens/AppDetail").then((m) => m.AppDetail), "the application");
const DeploymentPage = lazy(() => import("./screens/Deployments").then((m) => m.DeploymentPage), "the deployment");
const AcceptInvite = lazy(() => import("./screens/Invite").then((m) => m.AcceptInvite), "the invitation");
const GitHostReturn = lazy(() => import("./screens/GitHost").then((m) => m.GitHostReturn), "the git host");

// The session ended: sign in again, then come back to this page.
whenSignInRequired(() => {
  if (location.pathname === "/sign-in" || location.pathname === "/invite") return;
  navigate("/sign-in?next=" + encodeURIComponent(location.pathname + location.search), true);
});

function useUser() {
  const [user, setUser] = useState(currentUser());
  useEffect(() => onAuthChange(() => setUser(currentUser())), []);
  return user;
}

export function App() {
  const { path, query } = useLocation();
  const user = useUser();
  const [booting, setBooting] = useState(true);

  // A reload or a new tab: renew the access token from the refresh
  // cookie, silently, before deciding whether to show sign-in.
  useEffect(() => {
    void refresh().finally(() => setBooting(false));
  }, []);

  // The live stream runs while someone is signed in.
  useEffect(() => {
    if (user) stream.start();
    else stream.stop();
    // The unread count is the signed-in user's own.
    setUnread(null);
    if (user) void loadUnread();
  }, [user?.id]);

  // An invitation link opens whether or not someone is signed in here.
  if (path === "/invite") return <AcceptInvite />;
  if (booting) return <p class="boot">Capstan</p>;
  if (path === "/sign-in") return <SignIn next={query.get("next")} />;
  if (!user) {
    navigate("/sign-in?next=" + encodeURIComponent(path + location.search), true);
    return null;
  }

  const to = alias(path);
  if (to) {
    navigate(to, true);
    return null;
  }

  let screen;
  let p: Record<string, string> | null;
  if (path === "/" || path === "/servers") screen = <Fleet />;
  else if (path === "/servers/new") screen = <Enroll />;
  else if ((p = match("/servers/:id", path) ?? match("/servers/:id/:tab", path))) screen = <ServerDetail key={p.id} id={p.id} tab={p.tab} />;
  else if (path === "/jobs") screen = <Jobs />;
  else if ((p = match("/jobs/:id", path))) screen = <JobDetail key={p.id} id={p.id} />;
  else if (path === "/monitoring") screen = <Alerts />;
  else if (path === "/monitoring/rules") screen = <Rules />;
  else if (path === "/databases") screen = <Databases />;
  else if (path === "/databases/new") screen = <NewDatabase />;
  else if ((p = match("/databases/:id", path) ?? match("/databases/:id/:tab", path))) screen = <DatabaseDetail key={p.id} id={p.id} tab={p.tab} />;
  else if (path === "/backups") screen = <BackupRuns />;
  else if (path === "/backups/policies") screen = <BackupPolicies />;
  else if (path === "/backups/storage") screen = <BackupStorage />;
  else if ((p = match("/backups/runs/:id", path))) screen = <BackupRun key={p.id} id={p.id} />;
  else if (path === "/inbox") screen = <Inbox />;
  else if (path === "/notifications") screen = <Notifications />;
  else if ((p = match("/notifications/channels/:id", path))) screen = <ChannelDetail key={p.id} id={p.id} />;
  else if (path === "/audit") screen = <Audit />;
  else if (path === "/platform") screen = <Platform />;
  else if (path === "/platform/users" && user.admin) screen = <Users />;
  else if (path === "/platform/tokens") screen = <Tokens />;
  else if (path === "/applications") screen = <Apps />;
  else if (path === "/applications/new") screen = <AppNew serverId={query.get("server_id") ?? undefined} />;
  else if ((p = match("/applications/:id", path))) screen = <AppDetail key={p.id} id={p.id} />;
  else if ((p = match("/applications/:id/:tab", path))) screen = <AppDetail key={p.id} id={p.id} tab={p.tab} />;
  else if ((p = match("/deployments/:id", path))) screen = <DeploymentPage key={p.id} id={p.id} />;
  else if (path === manifestReturnPath) screen = <GitHostReturn step="manifest" />;
  else if (path === setupReturnPath) screen = <GitHostReturn step="setup" />;
  else screen = <NotFound what={path} />;

  const nav = [
    { href: "/servers", label: "Servers", active: path === "/" || path.startsWith("/servers") },
    { href: "/applications", label: "Applications",
      active: path.startsWith("/applications") || path.startsWith("/deployments") || path.startsWith("/githost/") },
    { href: "/jobs", label: "Jobs", active: path.startsWith("/jobs") },
    { href: "/monitoring", label: "Monitoring", active: path.startsWith("/monitoring") },
    { href: "/databases", label: "Databases", active: path.startsWith("/databases") },
    { href: "/backups", label: "Backups", active: path.startsWith("/backups") },
    { href: "/notifications", label: "Notifications", active: path.startsWith("/notifications") },
    ...(user.admin ? [{ href: "/audit", label: "Audit", active: path.startsWith("/audit") }] : []),
    { href: "/platform", label: "Platform", active: path.startsWith("/platform") },
  ];
  return (
    <div class="shell">
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <Link href="/" class="brand">
          Capstan
        </Link>
        <nav aria-label="Main">
          {nav.map((n) => (
            <Link key={n.href} href={n.href} aria-current={n.active ? "page" : undefined}>
              {n.label}
            </Link>
          ))}
        </nav>
        <div class="who">
          <InboxLink active={path === "/inbox"} />
          <LiveState />
          <span class="muted who-email" title={user.email}>
            {user.email}
          </span>
          {user.admin && <span class="muted">admin</span>}
          <HelpButton />
          <button type="button" onClick={() => void signOut()}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        {screen}
      </main>
      <Shortcuts />
    </div>
  );
}

function LiveState() {
  const s = useStreamState();
  const text = { live: "Live", connecting: "Connecting…", offline: "Reconnecting…" }[s];
  return (
    <span class={"live s-" + s} role="status" title="Live updates from the control plane">
      ● {text}
    </span>
  );
}

// InboxLink is the inbox in the header, with the unread count the stream
// keeps current.
function InboxLink({ active }: { active: boolean }) {
  const n = useUnread();
  return (
    <Link href="/inbox" class="inbox-link" aria-current={active ? "page" : undefined}>
      Inbox
      {n ? (
        <>
          <span class="unread-count" data-unread={n}>
            {n > 99 ? "99+" : n}
          </span>
          <span class="sr-only"> unread</span>
        </>
      ) : null}
    </Link>
  );
}

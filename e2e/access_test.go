package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// access is who may call an operation.
type access string

const (
	public   access = "public"    // no credentials
	signedIn access = "signed-in" // administrators and members
	admin    access = "admin"     // administrators only
	agent    access = "agent"     // an agent token only
)

// routeCase is how the access test calls one operation of the OpenAPI
// document.
type routeCase struct {
	// refusal, when not zero, is what a signed-in caller gets from a
	// change of something of its own that does not exist or with a body
	// that is not valid (the operation has no fixture to change).
	refusal int
	// refusesCredential: its 403 is a wrong password or code of the
	// caller's own, not a role the caller lacks.
	refusesCredential bool
	access            access
	// path is the concrete path to call, with ids of the fixtures for
	// reads and unknown ids for changes (which then change nothing).
	path string
	// body, when not nil, is sent as JSON.
	body any
	// output: an administrator's answer holds job output or secret values
	// of the fixtures (so a member's answer without them means something).
	output bool
	// endsSession: the call signs the caller out; it runs last.
	endsSession bool
	// undoesFixture: the call removes a fixture other calls read (the
	// connected git host app); it runs after them.
	undoesFixture bool
	// forTokens: the call is about the API token presented; a session
	// gets the refusal, a token an answer.
	forTokens bool
}

// Markers in the fixtures: job output and an environment value.
const (
	outputMarker = "job-output-s3cret-0451"
	envMarker    = "env-value-s3cret-0452"
)

// accessFixtures are records that hold job output and secret values.
type accessFixtures struct {
	serverID, serviceJobID, logReadJobID string
	appID, appLogsJobID, failedDeployID  string
	otherAppID                           string
	domainID                             string
	databaseID, databaseJobID            string
	exportDatabaseID, exportJobID        string
	backupJobID, backupRunID             string
}

// TestAccessByRole calls every operation of the served OpenAPI document
// with no token, a member's token and an administrator's token: no token is
// 401 on every non-public operation; a member is 403 on every
// administrator's operation and reads no job output and no secret value on
// the others; an administrator is never 401 or 403. An operation the table
// below does not name fails the test: each new one needs a decision.
func TestAccessByRole(t *testing.T) {
	host := testlab.StartGitHost(t)
	r := newAppRigWith(t, gitHostOptions(store.SQLite, host))
	member := createUser(t, r.ControlPlane, "member@example.com", testPassword, false)
	memberToken := signInUser(t, r.ControlPlane, member).AccessToken
	fx := makeAccessFixtures(t, r)
	// A channel to read (its destination never answers: no event routes
	// to it).
	chResp := r.Post(t, "/api/v1/notifications/channels", r.Token, map[string]any{"kind": "webhook", "name": "access",
		"config": map[string]any{"url": "https://127.0.0.1:1/hook"}, "events": []string{"server.revoked"}})
	var channel struct {
		ID string `json:"id"`
	}
	expectJSON(t, chResp, http.StatusCreated, &channel)

	const none = "x_none" // an id that names nothing
	cases := map[string]routeCase{
		"GET /healthz":                                             {access: public, path: "/healthz"},
		"POST /api/v1/auth/login":                                  {access: public, path: "/api/v1/auth/login", body: map[string]any{}},
		"POST /api/v1/auth/2fa/verify":                             {access: public, path: "/api/v1/auth/2fa/verify", body: map[string]any{}},
		"POST /api/v1/auth/refresh":                                {access: public, path: "/api/v1/auth/refresh"},
		"POST /api/v1/auth/logout":                                 {access: signedIn, path: "/api/v1/auth/logout", endsSession: true},
		"GET /api/v1/auth/me":                                      {access: signedIn, path: "/api/v1/auth/me"},
		"GET /api/v1/auth/sessions":                                {access: signedIn, path: "/api/v1/auth/sessions"},
		"DELETE /api/v1/auth/sessions/{id}":                        {access: signedIn, path: "/api/v1/auth/sessions/ses_none", refusal: http.StatusNotFound},
		"POST /api/v1/auth/password":                               {access: signedIn, path: "/api/v1/auth/password", body: map[string]any{}, refusesCredential: true, refusal: http.StatusUnprocessableEntity},
		"GET /api/v1/platform":                                     {access: signedIn, path: "/api/v1/platform"},
		"GET /api/v1/tokens":                                       {access: signedIn, path: "/api/v1/tokens"},
		"POST /api/v1/tokens":                                      {access: signedIn, path: "/api/v1/tokens", body: map[string]any{}, refusal: http.StatusUnprocessableEntity},
		"DELETE /api/v1/tokens/{id}":                               {access: signedIn, path: "/api/v1/tokens/tok_none", refusal: http.StatusNotFound},
		"GET /api/v1/tokens/current":                               {access: signedIn, path: "/api/v1/tokens/current", refusal: http.StatusNotFound, forTokens: true},
		"GET /api/v1/users":                                        {access: admin, path: "/api/v1/users"},
		"PATCH /api/v1/users/{id}":                                 {access: admin, path: "/api/v1/users/" + none, body: map[string]any{"admin": true}},
		"POST /api/v1/users/{id}/reset-2fa":                        {access: admin, path: "/api/v1/users/" + none + "/reset-2fa"},
		"DELETE /api/v1/users/{id}":                                {access: admin, path: "/api/v1/users/" + none},
		"GET /api/v1/users/invitations":                            {access: admin, path: "/api/v1/users/invitations"},
		"POST /api/v1/users/invitations":                           {access: admin, path: "/api/v1/users/invitations", body: map[string]any{}},
		"DELETE /api/v1/users/invitations/{id}":                    {access: admin, path: "/api/v1/users/invitations/" + none},
		"POST /api/v1/auth/invitation":                             {access: public, path: "/api/v1/auth/invitation", body: map[string]any{}},
		"POST /api/v1/auth/invitation/enrollment":                  {access: public, path: "/api/v1/auth/invitation/enrollment", body: map[string]any{}},
		"POST /api/v1/auth/invitation/accept":                      {access: public, path: "/api/v1/auth/invitation/accept", body: map[string]any{}},
		"POST /api/v1/platform/recovery-kit":                       {access: admin, path: "/api/v1/platform/recovery-kit", body: map[string]any{}},
		"GET /api/v1/audit-logs":                                   {access: admin, path: "/api/v1/audit-logs"},
		"GET /api/v1/events":                                       {access: admin, path: "/api/v1/events"},
		"GET /api/v1/monitoring/rules":                             {access: signedIn, path: "/api/v1/monitoring/rules"},
		"POST /api/v1/monitoring/rules":                            {access: admin, path: "/api/v1/monitoring/rules", body: map[string]any{}},
		"PATCH /api/v1/monitoring/rules/{id}":                      {access: admin, path: "/api/v1/monitoring/rules/" + none, body: map[string]any{}},
		"DELETE /api/v1/monitoring/rules/{id}":                     {access: admin, path: "/api/v1/monitoring/rules/" + none},
		"GET /api/v1/monitoring/alerts":                            {access: signedIn, path: "/api/v1/monitoring/alerts?state=all"},
		"POST /api/v1/monitoring/alerts/{id}/acknowledge":          {access: admin, path: "/api/v1/monitoring/alerts/" + none + "/acknowledge"},
		"POST /api/v1/monitoring/evaluate":                         {access: admin, path: "/api/v1/monitoring/evaluate"},
		"GET /api/v1/notifications":                                {access: signedIn, path: "/api/v1/notifications"},
		"GET /api/v1/notifications/channels":                       {access: admin, path: "/api/v1/notifications/channels"},
		"POST /api/v1/notifications/channels":                      {access: admin, path: "/api/v1/notifications/channels", body: map[string]any{}},
		"GET /api/v1/notifications/channels/{id}":                  {access: admin, path: "/api/v1/notifications/channels/" + channel.ID},
		"PATCH /api/v1/notifications/channels/{id}":                {access: admin, path: "/api/v1/notifications/channels/" + none, body: map[string]any{}},
		"DELETE /api/v1/notifications/channels/{id}":               {access: admin, path: "/api/v1/notifications/channels/" + none},
		"POST /api/v1/notifications/channels/{id}/test":            {access: admin, path: "/api/v1/notifications/channels/" + none + "/test"},
		"GET /api/v1/notifications/settings":                       {access: signedIn, path: "/api/v1/notifications/settings"},
		"PUT /api/v1/notifications/settings":                       {access: signedIn, path: "/api/v1/notifications/settings", body: map[string]any{"email_alerts": true, "email_deploy_failure": true, "email_deploy_success": false}},
		"POST /api/v1/notifications/read":                          {access: signedIn, path: "/api/v1/notifications/read", body: map[string]any{"all": true}},
		"GET /api/v1/notifications/email":                          {access: admin, path: "/api/v1/notifications/email"},
		"POST /api/v1/notifications/email/test":                    {access: admin, path: "/api/v1/notifications/email/test", body: map[string]any{}},
		"GET /api/v1/servers":                                      {access: signedIn, path: "/api/v1/servers"},
		"GET /api/v1/servers/compact":                              {access: signedIn, path: "/api/v1/servers/compact"},
		"GET /api/v1/servers/sparklines":                           {access: signedIn, path: "/api/v1/servers/sparklines?ids=" + fx.serverID},
		"POST /api/v1/servers/enrollments":                         {access: admin, path: "/api/v1/servers/enrollments", body: map[string]any{}},
		"GET /api/v1/servers/{id}":                                 {access: signedIn, path: "/api/v1/servers/" + fx.serverID},
		"DELETE /api/v1/servers/{id}":                              {access: admin, path: "/api/v1/servers/" + none},
		"POST /api/v1/servers/{id}/enrollments":                    {access: admin, path: "/api/v1/servers/" + none + "/enrollments"},
		"POST /api/v1/servers/{id}/revoke":                         {access: admin, path: "/api/v1/servers/" + none + "/revoke"},
		"POST /api/v1/servers/{id}/actions":                        {access: admin, path: "/api/v1/servers/" + none + "/actions", body: map[string]any{}},
		"GET /api/v1/servers/{id}/metrics":                         {access: signedIn, path: "/api/v1/servers/" + fx.serverID + "/metrics?range=1h"},
		"GET /api/v1/servers/{id}/requests/other":                  {access: signedIn, path: "/api/v1/servers/" + fx.serverID + "/requests/other?range=1h"},
		"GET /api/v1/monitoring/fleet":                             {access: signedIn, path: "/api/v1/monitoring/fleet?range=1h"},
		"GET /api/v1/jobs":                                         {access: signedIn, path: "/api/v1/jobs?limit=100", output: true},
		"GET /api/v1/jobs/{id}":                                    {access: signedIn, path: "/api/v1/jobs/" + fx.serviceJobID, output: true},
		"POST /api/v1/jobs/{id}/cancel":                            {access: admin, path: "/api/v1/jobs/" + none + "/cancel"},
		"GET /api/v1/logs/sources":                                 {access: signedIn, path: "/api/v1/logs/sources?server_id=" + fx.serverID},
		"POST /api/v1/logs":                                        {access: admin, path: "/api/v1/logs", body: map[string]any{}},
		"GET /api/v1/logs/{job_id}":                                {access: signedIn, path: "/api/v1/logs/" + fx.logReadJobID, output: true},
		"GET /api/v1/applications":                                 {access: signedIn, path: "/api/v1/applications", output: true},
		"POST /api/v1/applications":                                {access: admin, path: "/api/v1/applications", body: map[string]any{}},
		"GET /api/v1/applications/{id}":                            {access: signedIn, path: "/api/v1/applications/" + fx.appID, output: true},
		"PATCH /api/v1/applications/{id}":                          {access: admin, path: "/api/v1/applications/" + none, body: map[string]any{}},
		"PATCH /api/v1/applications/{id}/env":                      {access: admin, path: "/api/v1/applications/" + none + "/env", body: map[string]any{}},
		"DELETE /api/v1/applications/{id}":                         {access: admin, path: "/api/v1/applications/" + none},
		"POST /api/v1/applications/{id}/deployments":               {access: admin, path: "/api/v1/applications/" + none + "/deployments"},
		"GET /api/v1/applications/{id}/deployments":                {access: signedIn, path: "/api/v1/applications/" + fx.appID + "/deployments", output: true},
		"POST /api/v1/applications/{id}/logs":                      {access: admin, path: "/api/v1/applications/" + none + "/logs"},
		"GET /api/v1/applications/{id}/logs/{job_id}":              {access: signedIn, path: "/api/v1/applications/" + fx.appID + "/logs/" + fx.appLogsJobID, output: true},
		"GET /api/v1/applications/{id}/requests":                   {access: signedIn, path: "/api/v1/applications/" + fx.appID + "/requests"},
		"GET /api/v1/deployments":                                  {access: signedIn, path: "/api/v1/deployments", output: true},
		"GET /api/v1/deployments/{id}":                             {access: signedIn, path: "/api/v1/deployments/" + fx.failedDeployID, output: true},
		"POST /api/v1/deployments/{id}/cancel":                     {access: admin, path: "/api/v1/deployments/" + none + "/cancel"},
		"POST /api/v1/deployments/{id}/rollback":                   {access: admin, path: "/api/v1/deployments/" + none + "/rollback"},
		"GET /api/v1/domains":                                      {access: signedIn, path: "/api/v1/domains"},
		"POST /api/v1/domains":                                     {access: admin, path: "/api/v1/domains", body: map[string]any{}},
		"GET /api/v1/domains/{id}":                                 {access: signedIn, path: "/api/v1/domains/" + fx.domainID},
		"PATCH /api/v1/domains/{id}":                               {access: admin, path: "/api/v1/domains/" + none, body: map[string]any{}},
		"DELETE /api/v1/domains/{id}":                              {access: admin, path: "/api/v1/domains/" + none},
		"POST /api/v1/domains/{id}/check":                          {access: admin, path: "/api/v1/domains/" + none + "/check"},
		"POST /api/v1/domains/servers/{server_id}/apply":           {access: admin, path: "/api/v1/domains/servers/" + none + "/apply"},
		"GET /api/v1/databases/engines":                            {access: signedIn, path: "/api/v1/databases/engines"},
		"GET /api/v1/databases":                                    {access: signedIn, path: "/api/v1/databases", output: true},
		"POST /api/v1/databases/external":                          {access: admin, path: "/api/v1/databases/external", body: map[string]any{}},
		"POST /api/v1/databases":                                   {access: admin, path: "/api/v1/databases", body: map[string]any{}},
		"POST /api/v1/databases/{id}/control":                      {access: admin, path: "/api/v1/databases/" + none + "/control", body: map[string]any{}},
		"GET /api/v1/databases/{id}":                               {access: signedIn, path: "/api/v1/databases/" + fx.databaseID, output: true},
		"DELETE /api/v1/databases/{id}":                            {access: admin, path: "/api/v1/databases/" + none},
		"PUT /api/v1/databases/{id}/tls":                           {access: admin, path: "/api/v1/databases/" + none + "/tls", body: map[string]any{}},
		"GET /api/v1/databases/{id}/connection":                    {access: admin, path: "/api/v1/databases/" + fx.databaseID + "/connection", output: true},
		"POST /api/v1/databases/{id}/query":                        {access: admin, path: "/api/v1/databases/" + none + "/query", body: map[string]any{}},
		"POST /api/v1/databases/{id}/explore":                      {access: admin, path: "/api/v1/databases/" + none + "/explore", body: map[string]any{}},
		"POST /api/v1/databases/{id}/kv":                           {access: admin, path: "/api/v1/databases/" + none + "/kv", body: map[string]any{}},
		"GET /api/v1/databases/{id}/jobs/{job_id}":                 {access: signedIn, path: "/api/v1/databases/" + fx.databaseID + "/jobs/" + fx.databaseJobID, output: true},
		"POST /api/v1/databases/{id}/databases":                    {access: admin, path: "/api/v1/databases/" + none + "/databases", body: map[string]any{}},
		"DELETE /api/v1/databases/{id}/databases/{name}":           {access: admin, path: "/api/v1/databases/" + none + "/databases/shop"},
		"POST /api/v1/databases/{id}/attach":                       {access: admin, path: "/api/v1/databases/" + none + "/attach", body: map[string]any{}},
		"POST /api/v1/databases/{id}/users":                        {access: admin, path: "/api/v1/databases/" + none + "/users", body: map[string]any{}},
		"POST /api/v1/databases/{id}/users/{credential_id}/rotate": {access: admin, path: "/api/v1/databases/" + none + "/users/dbc_none/rotate"},
		"DELETE /api/v1/databases/{id}/users/{username}":           {access: admin, path: "/api/v1/databases/" + none + "/users/reader"},
		"GET /api/v1/databases/{id}/metrics":                       {access: signedIn, path: "/api/v1/databases/" + fx.databaseID + "/metrics"},
		"POST /api/v1/databases/{id}/export":                       {access: admin, path: "/api/v1/databases/" + none + "/export", body: map[string]any{}},
		"GET /api/v1/databases/{id}/exports/{job_id}":              {access: admin, path: "/api/v1/databases/" + fx.exportDatabaseID + "/exports/" + fx.exportJobID, output: true},
		"POST /api/v1/databases/{id}/import":                       {access: admin, path: "/api/v1/databases/" + none + "/import?database=app"},
		"GET /api/v1/backups/settings":                             {access: signedIn, path: "/api/v1/backups/settings"},
		"PUT /api/v1/backups/settings":                             {access: admin, path: "/api/v1/backups/settings", body: map[string]any{}},
		"POST /api/v1/backups/settings/test":                       {access: admin, path: "/api/v1/backups/settings/test?server_id=" + none},
		"GET /api/v1/backups/jobs/{job_id}":                        {access: signedIn, path: "/api/v1/backups/jobs/" + fx.backupJobID, output: true},
		"POST /api/v1/backups/run":                                 {access: admin, path: "/api/v1/backups/run", body: map[string]any{}},
		"GET /api/v1/backups":                                      {access: signedIn, path: "/api/v1/backups", output: true},
		"GET /api/v1/backups/summary":                              {access: signedIn, path: "/api/v1/backups/summary", output: true},
		"GET /api/v1/backups/{run_id}":                             {access: signedIn, path: "/api/v1/backups/" + fx.backupRunID, output: true},
		"POST /api/v1/backups/{run_id}/verify":                     {access: admin, path: "/api/v1/backups/" + none + "/verify"},
		"POST /api/v1/backups/{run_id}/restore":                    {access: admin, path: "/api/v1/backups/" + none + "/restore", body: map[string]any{}},
		"DELETE /api/v1/backups/{run_id}":                          {access: admin, path: "/api/v1/backups/" + none},
		"GET /api/v1/backups/policies":                             {access: signedIn, path: "/api/v1/backups/policies"},
		"PUT /api/v1/backups/policies/{instance_id}":               {access: admin, path: "/api/v1/backups/policies/" + none, body: map[string]any{}},
		"GET /agent/install.sh":                                    {access: public, path: "/agent/install.sh"},
		"GET /agent/package.tar.gz":                                {access: public, path: "/agent/package.tar.gz?arch=amd64"},
		"GET /agent/caddy":                                         {access: public, path: "/agent/caddy?arch=amd64"},
		"POST /agent/v1/enroll":                                    {access: public, path: "/agent/v1/enroll", body: map[string]any{}},
		"POST /agent/v1/heartbeat":                                 {access: agent, path: "/agent/v1/heartbeat", body: map[string]any{}},
		"POST /agent/v1/metrics":                                   {access: agent, path: "/agent/v1/metrics", body: map[string]any{}},
		"POST /agent/v1/health":                                    {access: agent, path: "/agent/v1/health", body: map[string]any{}},
		"POST /agent/v1/inventory":                                 {access: agent, path: "/agent/v1/inventory", body: map[string]any{}},
		"POST /agent/v1/requests":                                  {access: agent, path: "/agent/v1/requests", body: map[string]any{}},
		"GET /agent/v1/proxy":                                      {access: agent, path: "/agent/v1/proxy"},
		"GET /agent/v1/databases":                                  {access: agent, path: "/agent/v1/databases"},
		"POST /agent/v1/databases/metrics":                         {access: agent, path: "/agent/v1/databases/metrics", body: map[string]any{}},
		"POST /agent/v1/jobs/claim":                                {access: agent, path: "/agent/v1/jobs/claim", body: map[string]any{}},
		"GET /agent/v1/jobs/{id}/secrets":                          {access: agent, path: "/agent/v1/jobs/" + fx.serviceJobID + "/secrets"},
		"POST /agent/v1/jobs/{id}/storage":                         {access: agent, path: "/agent/v1/jobs/" + fx.serviceJobID + "/storage", body: map[string]any{}},
		"GET /agent/v1/jobs/{id}/storage":                          {access: agent, path: "/agent/v1/jobs/" + fx.serviceJobID + "/storage?key=x"},
		"POST /agent/v1/jobs/{id}/events":                          {access: agent, path: "/agent/v1/jobs/" + none + "/events", body: map[string]any{}},
		"POST /agent/v1/jobs/{id}/complete":                        {access: agent, path: "/agent/v1/jobs/" + none + "/complete", body: map[string]any{}},
		"PUT /agent/v1/jobs/{id}/artifact":                         {access: agent, path: "/agent/v1/jobs/" + none + "/artifact"},
		"GET /agent/v1/jobs/{id}/artifact":                         {access: agent, path: "/agent/v1/jobs/" + none + "/artifact"},
	}

	// The git host integration: administrators only.
	repo := host.AddRepo("acme", "web", true, map[string]string{"main": strings.Repeat("a", 40)})
	inst := connectGitHost(t, r.ControlPlane, host, r.Token, "acme")
	branches := fmt.Sprintf("/api/v1/githost/repositories/%d/%d/branches", inst, repo.ID)
	for name, c := range map[string]routeCase{
		"GET /api/v1/githost/status":                                            {path: "/api/v1/githost/status"},
		"POST /api/v1/githost/manifest":                                         {path: "/api/v1/githost/manifest", body: map[string]any{}},
		"POST /api/v1/githost/manifest/complete":                                {path: "/api/v1/githost/manifest/complete", body: map[string]any{}},
		"POST /api/v1/githost/installations":                                    {path: "/api/v1/githost/installations", body: map[string]any{}},
		"GET /api/v1/githost/repositories":                                      {path: "/api/v1/githost/repositories"},
		"GET /api/v1/githost/repositories/{installation_id}/{repo_id}/branches": {path: branches},
		"DELETE /api/v1/githost/app":                                            {path: "/api/v1/githost/app", undoesFixture: true},
	} {
		c.access = admin
		cases[name] = c
	}
	// The provider's webhook deliveries carry a signature, not a token.
	cases["POST /api/v1/githost/webhook"] = routeCase{access: public, path: "/api/v1/githost/webhook", body: map[string]any{}}

	// The cloud drive for backups: administrators manage it; the
	// provider sends the browser back to the callback without a token.
	cases["GET /api/v1/backups/clouddrive"] = routeCase{access: admin, path: "/api/v1/backups/clouddrive"}
	cases["POST /api/v1/backups/clouddrive/connect"] = routeCase{access: admin, path: "/api/v1/backups/clouddrive/connect"}
	cases["GET /api/v1/backups/clouddrive/callback"] = routeCase{access: public, path: "/api/v1/backups/clouddrive/callback?state=x&code=y"}
	cases["DELETE /api/v1/backups/clouddrive/connection"] = routeCase{access: admin, path: "/api/v1/backups/clouddrive/connection"}
	// The live stream's ticket is its credential (a browser's EventSource
	// sends no headers); what each role receives on it is tested in
	// internal/httpapi (TestStreamRoleFiltering).
	cases["POST /api/v1/stream/tickets"] = routeCase{access: signedIn, path: "/api/v1/stream/tickets"}
	cases["GET /api/v1/stream"] = routeCase{access: public, path: "/api/v1/stream?ticket=stk_unknown"}

	// The document's operations are exactly the table's, each declared
	// with the security its access needs.
	var doc struct {
		Paths map[string]map[string]struct {
			Security    *[]map[string][]string `json:"security"`
			Responses   map[string]any         `json:"responses"`
			Description string                 `json:"description"`
			Token       *struct {
				Scope       string `json:"scope"`
				SessionOnly bool   `json:"session_only"`
			} `json:"x-capstan-token"`
		} `json:"paths"`
	}
	expectJSON(t, r.Get(t, "/openapi.json", ""), http.StatusOK, &doc)
	var documented []string
	for path, item := range doc.Paths {
		for method, o := range item {
			name := strings.ToUpper(method) + " " + path
			documented = append(documented, name)
			c, ok := cases[name]
			if !ok {
				t.Errorf("%s is in the OpenAPI document but not in this test's table: decide who may call it and add it", name)
				continue
			}
			_, forbids := o.Responses["403"]
			adminOnly := strings.Contains(o.Description, "Administrators only")
			switch {
			case o.Security == nil:
				t.Errorf("%s declares no security at all; want [] (public) or a scheme", name)
			case len(*o.Security) == 0:
				if c.access != public {
					t.Errorf("%s is documented as public (security: []), the table says %s", name, c.access)
				}
			case (*o.Security)[0]["agentToken"] != nil:
				if c.access != agent {
					t.Errorf("%s is documented for agents, the table says %s", name, c.access)
				}
			case (*o.Security)[0]["bearer"] != nil:
				if want := map[bool]access{true: admin, false: signedIn}[adminOnly]; c.access != want || !forbids {
					t.Errorf("%s is documented as %s (403 listed: %v), the table says %s", name, want, forbids, c.access)
				}
				scope, sessionOnly := tokenPolicy(name, c.access)
				if o.Token == nil || o.Token.Scope != scope || o.Token.SessionOnly != sessionOnly {
					t.Errorf("%s documents token policy %+v, the table says scope %s, session only %v", name, o.Token, scope, sessionOnly)
				}
			default:
				t.Errorf("%s declares security %v", name, *o.Security)
			}
		}
	}
	for name := range cases {
		if !slices.Contains(documented, name) {
			t.Errorf("the table names %s, which the OpenAPI document does not have", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Calls that end the caller's session go last.
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		if a, b := cases[names[i]].endsSession, cases[names[j]].endsSession; a != b {
			return b
		}
		if a, b := cases[names[i]].undoesFixture, cases[names[j]].undoesFixture; a != b {
			return b
		}
		return names[i] < names[j]
	})

	callers := []struct{ name, token string }{{"no token", ""}, {"member", memberToken}, {"admin", r.Token}}
	tokens := accessTokens(t, r, memberToken, fx)
	for _, name := range names {
		c := cases[name]
		method, _, _ := strings.Cut(name, " ")
		for _, caller := range callers {
			resp := r.Do(t, Req{Method: method, Path: c.path, Token: caller.token, JSON: c.body})
			what := name + " as " + caller.name
			body := string(resp.Body)
			switch {
			case c.access == public:
				// Whatever it answers, it is not for want of a token.
				if resp.Status == http.StatusUnauthorized && problemCode(resp) == "invalid-token" {
					t.Errorf("%s: public operation asks for a token: %s", what, body)
				}
			case c.access == agent:
				// 429: the address sent too many tokens that are not
				// agents' (as this test does), which opens nothing either.
				if resp.Status != http.StatusUnauthorized && problemCode(resp) != "agent-auth-throttled" {
					t.Errorf("%s: status %d, want 401 (only an agent token opens it): %s", what, resp.Status, body)
				}
			case caller.token == "":
				if resp.Status != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s: status %d (WWW-Authenticate %q), want 401 with a challenge: %s", what, resp.Status,
						resp.Header.Get("WWW-Authenticate"), body)
				}
			case caller.name == "member" && c.access == admin:
				if resp.Status != http.StatusForbidden || problemCode(resp) != "admin-required" {
					t.Errorf("%s: status %d, want 403 admin-required: %s", what, resp.Status, body)
				}
			case c.refusal != 0:
				if resp.Status != c.refusal {
					t.Errorf("%s: status %d, want %d: %s", what, resp.Status, c.refusal, body)
				}
			case caller.name == "member":
				if resp.Status/100 != 2 {
					t.Errorf("%s: status %d, want a success: %s", what, resp.Status, body)
				}
				if strings.Contains(body, outputMarker) || strings.Contains(body, envMarker) {
					t.Errorf("%s: a member reads job output or a secret value: %s", what, body)
				}
			default: // admin
				if resp.Status == http.StatusUnauthorized || resp.Status == http.StatusForbidden {
					t.Errorf("%s: status %d: %s", what, resp.Status, body)
				}
				if method == http.MethodGet && resp.Status != http.StatusOK {
					t.Errorf("%s: status %d, want 200: %s", what, resp.Status, body)
				}
				if c.output && !strings.Contains(body, outputMarker) && !strings.Contains(body, envMarker) {
					t.Errorf("%s: the fixtures' output is not in an administrator's answer, so the member check proves nothing: %s", what, body)
				}
			}
		}
		checkTokens(t, r, name, c, tokens)
	}
}

// problemCode returns the last segment of a problem's type.
func problemCode(r *Response) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(r.Body, &p) != nil {
		return ""
	}
	return p.Type[strings.LastIndex(p.Type, "/")+1:]
}

// makeAccessFixtures plays the agent to leave job output, an error text,
// log lines, a failed and a succeeded deployment with a container log tail,
// a failed removal and an environment value in the store, all marked.
func makeAccessFixtures(t *testing.T, r *appRig) accessFixtures {
	t.Helper()
	fx := accessFixtures{serverID: r.serverID}
	events := func(jobID string) {
		t.Helper()
		resp := r.agentCall(t, r.agent, http.MethodPost, "/jobs/"+jobID+"/events", agentproto.EventsRequest{Events: []agentproto.Event{
			{At: time.Now().UTC(), Level: agentproto.LevelWarn, Message: "the last 1 lines of the log: " + outputMarker,
				Data: json.RawMessage(`{"lines":["stderr: ` + outputMarker + `"]}`)}}})
		expectStatus(t, resp, http.StatusNoContent)
	}
	complete := func(jobID, status string, data any, errText string) {
		t.Helper()
		req := agentproto.CompleteRequest{Status: status, Error: errText, Output: json.RawMessage(`"` + outputMarker + `"`)}
		if data != nil {
			b, err := json.Marshal(data)
			if err != nil {
				t.Fatal(err)
			}
			req.Data = b
		}
		expectStatus(t, r.agentCall(t, r.agent, http.MethodPost, "/jobs/"+jobID+"/complete", req), http.StatusOK)
	}
	lines := []agentproto.LogLine{{At: time.Now().UTC(), Priority: 6, Message: "password=" + outputMarker}}

	// A service log read that returned lines, and a restart that failed
	// with the agent's text.
	resp := r.action(t, r.serverID, map[string]any{"type": agentproto.JobServiceLogs, "payload": map[string]any{"unit": "web.service"}})
	expectStatus(t, resp, http.StatusAccepted)
	j := r.claimAs(t, agentproto.JobServiceLogs)
	fx.serviceJobID = j.ID
	events(j.ID)
	complete(j.ID, agentproto.StatusSucceeded, agentproto.LogsResult{Lines: lines}, "")
	resp = r.action(t, r.serverID, map[string]any{"type": agentproto.JobServiceRestart, "payload": map[string]any{"unit": "web.service"}})
	expectStatus(t, resp, http.StatusAccepted)
	complete(r.claimAs(t, agentproto.JobServiceRestart).ID, agentproto.StatusFailed, nil, "systemctl: "+outputMarker)

	// A journal read.
	resp = r.Post(t, "/api/v1/logs", r.Token, map[string]any{"server_id": r.serverID, "source": "journal", "unit": "web.service"})
	expectStatus(t, resp, http.StatusAccepted)
	j = r.claimAs(t, agentproto.JobLogsRead)
	fx.logReadJobID = j.ID
	complete(j.ID, agentproto.StatusSucceeded, agentproto.LogsResult{Lines: lines, Cursor: "s=1"}, "")

	// An application with a secret: a deployment that failed with a log
	// tail, one that succeeded, and a log read of its container.
	app := r.createApp(t, map[string]any{
		"name": "web", "source": map[string]any{"type": "image", "image": "ghcr.io/acme/web:1.0"},
		"container_port": 8080, "env": []map[string]string{{"key": "DATABASE_URL", "value": envMarker}}})
	fx.appID, fx.failedDeployID = app.ID, app.Latest.ID
	j = r.claimAs(t, agentproto.JobAppDeploy)
	events(j.ID)
	complete(j.ID, agentproto.StatusFailed, nil, "health check failed: "+outputMarker)
	r.deployApp(t, app.ID, nil)
	complete(r.claimAs(t, agentproto.JobAppDeploy).ID, agentproto.StatusSucceeded,
		agentproto.DeployResult{ContainerName: "web-" + outputMarker, ImageID: "sha256:1", HealthStatus: 200}, "")
	resp = r.Post(t, "/api/v1/applications/"+app.ID+"/logs", r.Token, map[string]any{})
	expectStatus(t, resp, http.StatusAccepted)
	j = r.claimAs(t, agentproto.JobAppLogs)
	fx.appLogsJobID = j.ID
	complete(j.ID, agentproto.StatusSucceeded, agentproto.AppLogsResult{Lines: lines, State: "running", ContainerID: outputMarker}, "")

	// An application whose removal failed with the agent's text.
	old := r.createApp(t, map[string]any{
		"name": "old", "source": map[string]any{"type": "image", "image": "ghcr.io/acme/old:1.0"},
		"container_port": 8080, "deploy": false})
	fx.otherAppID = old.ID
	expectStatus(t, r.del(t, "/api/v1/applications/"+old.ID), http.StatusAccepted)
	complete(r.claimAs(t, agentproto.JobAppRemove).ID, agentproto.StatusFailed, nil, "docker rm: "+outputMarker)

	// An external database whose connection test failed with the
	// engine's text; its password is a secret value.
	resp = r.Post(t, "/api/v1/databases/external", r.Token, map[string]any{"name": "main", "server_id": r.serverID,
		"engine": "postgres", "host": "127.0.0.1", "port": 5432, "username": "app", "password": envMarker, "database": "app",
		"tls_mode": "disable"})
	var reg struct {
		Instance struct {
			ID string `json:"id"`
		} `json:"instance"`
		JobID string `json:"job_id"`
	}
	expectJSON(t, resp, http.StatusAccepted, &reg)
	fx.databaseID, fx.databaseJobID = reg.Instance.ID, reg.JobID
	j = r.claimAs(t, agentproto.JobDBConnect)
	complete(j.ID, agentproto.StatusFailed, agentproto.DBFailure{Error: agentproto.DBError{Code: "28P01",
		Message: "password authentication failed: " + outputMarker}}, "password authentication failed: "+outputMarker)

	// An external database that connected, and an export of it whose
	// file holds the marker.
	resp = r.Post(t, "/api/v1/databases/external", r.Token, map[string]any{"name": "reachable", "server_id": r.serverID,
		"engine": "postgres", "host": "127.0.0.1", "port": 5432, "username": "app", "password": envMarker, "database": "app",
		"tls_mode": "disable"})
	expectJSON(t, resp, http.StatusAccepted, &reg)
	fx.exportDatabaseID = reg.Instance.ID
	complete(r.claimAs(t, agentproto.JobDBConnect).ID, agentproto.StatusSucceeded, agentproto.DBConnectResult{ServerVersion: "15.4"}, "")
	testlab.Eventually(t, time.Minute, "the database is ready", func() bool {
		var in DatabaseInfo
		r.Get(t, "/api/v1/databases/"+fx.exportDatabaseID, r.Token).JSON(t, &in)
		return in.State == "ready"
	})
	resp = r.Post(t, "/api/v1/databases/"+fx.exportDatabaseID+"/export", r.Token, map[string]any{"database": "app"})
	expectStatus(t, resp, http.StatusAccepted)
	j = r.claimAs(t, agentproto.JobDBExport)
	fx.exportJobID = j.ID
	dump := []byte("-- " + outputMarker + "\n")
	resp = r.Do(t, Req{Method: http.MethodPut, Path: "/agent/v1/jobs/" + j.ID + "/artifact", Token: r.agent, Body: dump,
		ContentType: agentproto.ArtifactContentType})
	var receipt agentproto.ArtifactReceipt
	expectJSON(t, resp, http.StatusOK, &receipt)
	complete(j.ID, agentproto.StatusSucceeded, agentproto.DBExportResult{Tool: agentproto.DBToolHost, Bytes: receipt.Bytes,
		SHA256: receipt.SHA256, DumpBytes: 100}, "")

	// Backup storage whose secret is a secret value, and a storage test
	// that failed with the provider's text.
	resp = r.Do(t, Req{Method: http.MethodPut, Path: "/api/v1/backups/settings", Token: r.Token, JSON: map[string]any{
		"endpoint": "127.0.0.1:9", "bucket": "backups", "access_key_id": "AKFIXTURE", "secret_access_key": envMarker}})
	expectStatus(t, resp, http.StatusOK)
	// The server's agent says it takes storage grants, as every agent
	// since they exist does.
	expectStatus(t, r.agentCall(t, r.agent, http.MethodPost, "/heartbeat", agentproto.HeartbeatRequest{AgentVersion: buildVersion,
		Facts: &agentproto.Facts{Hostname: "fake", OS: "debian", Arch: "amd64", AgentVersion: buildVersion,
			Capabilities: []string{agentproto.CapabilityStorageGrants}}}), http.StatusOK)
	resp = r.Post(t, "/api/v1/backups/settings/test?server_id="+r.serverID, r.Token, nil)
	expectStatus(t, resp, http.StatusAccepted)
	j = r.claimAs(t, agentproto.JobBackupStorageTest)
	fx.backupJobID = j.ID
	events(j.ID)
	complete(j.ID, agentproto.StatusFailed, agentproto.BackupStorageTestResult{Key: "capstan-probe/" + j.ID, Steps: []agentproto.BackupStorageStep{
		{Step: agentproto.BackupStepWrite, Error: "AccessDenied: " + outputMarker}}}, "write: AccessDenied: "+outputMarker)
	// A backup that failed with the dump tool's text.
	resp = r.Post(t, "/api/v1/backups/run", r.Token, map[string]any{"instance_id": fx.exportDatabaseID})
	var queued struct {
		Run struct {
			ID string `json:"id"`
		} `json:"run"`
	}
	expectJSON(t, resp, http.StatusAccepted, &queued)
	fx.backupRunID = queued.Run.ID
	complete(r.claimAs(t, agentproto.JobBackupRun).ID, agentproto.StatusFailed, agentproto.BackupRunResult{Step: "dump"},
		"pg_dump: "+outputMarker)

	// A domain (its proxy.apply job stays queued).
	resp = r.Post(t, "/api/v1/domains", r.Token, map[string]any{"hostname": "example.com", "application_id": app.ID, "tls_mode": "auto"})
	var dom struct {
		Domain struct {
			ID string `json:"id"`
		} `json:"domain"`
	}
	expectJSON(t, resp, http.StatusCreated, &dom)
	fx.domainID = dom.Domain.ID
	if fx.domainID == "" {
		t.Fatalf("domain reply: %s", resp.Body)
	}
	return fx
}

// TestEnvValuesRevealAudited reads an application's environment as an
// administrator with and without reveal, and as a member, and checks the
// audit log and the job secrets after the deploy job ended.
func TestEnvValuesRevealAudited(t *testing.T) {
	r := newAppRig(t, store.SQLite)
	resp := r.Post(t, "/api/v1/applications", r.Token, map[string]any{
		"name": "web", "server_id": r.serverID, "source": map[string]any{"type": "image", "image": "ghcr.io/acme/web:1.0"},
		"container_port": 8080, "env": []map[string]string{{"key": "DATABASE_URL", "value": envMarker}}})
	expectStatus(t, resp, http.StatusCreated)
	if strings.Contains(string(resp.Body), envMarker) {
		t.Fatalf("the create reply shows the env value: %s", resp.Body)
	}
	var app AppInfo
	resp.JSON(t, &app)

	type envEntry struct {
		Key      string  `json:"key"`
		Value    *string `json:"value"`
		ValueSet bool    `json:"value_set"`
	}
	envOf := func(path, token string) []envEntry {
		t.Helper()
		var d struct {
			Env []envEntry `json:"env"`
		}
		expectJSON(t, r.Get(t, path, token), http.StatusOK, &d)
		return d.Env
	}
	if env := envOf("/api/v1/applications/"+app.ID+"?reveal=false", r.Token); len(env) != 1 || env[0].Value != nil || !env[0].ValueSet ||
		env[0].Key != "DATABASE_URL" {
		t.Fatalf("reveal=false: %+v", env)
	}
	if n := len(auditEntries(t, r.ControlPlane, r.Token, "application.env.read")); n != 0 {
		t.Fatalf("application.env.read entries after reads without values: %d", n)
	}
	if env := envOf("/api/v1/applications/"+app.ID, r.Token); len(env) != 1 || env[0].Value == nil || *env[0].Value != envMarker {
		t.Fatalf("an administrator's read: %+v", env)
	}
	entries := auditEntries(t, r.ControlPlane, r.Token, "application.env.read")
	if len(entries) != 1 || entries[0].Actor.ID != r.Admin.ID || entries[0].Target.ID != app.ID {
		t.Fatalf("application.env.read entries: %+v", entries)
	}
	member := createUser(t, r.ControlPlane, "member@example.com", testPassword, false)
	ms := signInUser(t, r.ControlPlane, member)
	if env := envOf("/api/v1/applications/"+app.ID+"?reveal=true", ms.AccessToken); len(env) != 1 || env[0].Value != nil || !env[0].ValueSet {
		t.Fatalf("a member's read with reveal=true: %+v", env)
	}
	if n := len(auditEntries(t, r.ControlPlane, r.Token, "application.env.read")); n != 1 {
		t.Fatalf("application.env.read entries after a member's read: %d, want 1", n)
	}

	// The deploy job's secrets are there while it runs, gone once it ended.
	j := r.claimAs(t, agentproto.JobAppDeploy)
	if s := r.secretsOf(t, j.ID); s["DATABASE_URL"] != envMarker {
		t.Fatalf("running job's secrets: %v", s)
	}
	r.completeJob(t, j.ID, agentproto.StatusSucceeded, agentproto.DeployResult{ImageID: "sha256:1"}, "")
	expectProblem(t, r.agentCall(t, r.agent, http.MethodGet, "/jobs/"+j.ID+"/secrets", nil), http.StatusForbidden, "job-not-running")
	if job := r.job(t, j.ID); job.Status != "succeeded" {
		t.Fatalf("deploy job: %+v", job)
	}
	var hasSecrets struct {
		HasSecrets bool `json:"has_secrets"`
	}
	r.Get(t, "/api/v1/jobs/"+j.ID, r.Token).JSON(t, &hasSecrets)
	if hasSecrets.HasSecrets {
		t.Fatal("the finished deploy job still holds its secrets")
	}
}

// tokenScopes are the operations whose API-token scope is not the
// default: read for what any signed-in user may call, write for an
// administrator's changes, admin for what only administrators read.
var tokenScopes = map[string]string{
	"POST /api/v1/applications/{id}/deployments":      "deploy",
	"POST /api/v1/deployments/{id}/rollback":          "deploy",
	"POST /api/v1/deployments/{id}/cancel":            "deploy",
	"POST /api/v1/servers/{id}/actions":               "operate",
	"POST /api/v1/jobs/{id}/cancel":                   "operate",
	"POST /api/v1/databases/{id}/control":             "operate",
	"POST /api/v1/databases/{id}/query":               "operate",
	"POST /api/v1/databases/{id}/explore":             "operate",
	"POST /api/v1/databases/{id}/kv":                  "operate",
	"POST /api/v1/databases/{id}/export":              "operate",
	"POST /api/v1/databases/{id}/import":              "operate",
	"POST /api/v1/backups/run":                        "operate",
	"POST /api/v1/backups/{run_id}/verify":            "operate",
	"POST /api/v1/backups/{run_id}/restore":           "operate",
	"POST /api/v1/backups/settings/test":              "operate",
	"POST /api/v1/monitoring/alerts/{id}/acknowledge": "operate",
	"POST /api/v1/monitoring/evaluate":                "operate",
	"POST /api/v1/domains/{id}/check":                 "operate",
	"POST /api/v1/domains/servers/{server_id}/apply":  "operate",
	"POST /api/v1/logs":                               "read:secrets",
	"POST /api/v1/applications/{id}/logs":             "read:secrets",
	"GET /api/v1/databases/{id}/connection":           "read:secrets",
	"GET /api/v1/databases/{id}/exports/{job_id}":     "read:secrets",
}

// tokenSessionOnly are the operations no API token may call.
var tokenSessionOnly = []string{
	"POST /api/v1/auth/logout", "GET /api/v1/auth/sessions", "DELETE /api/v1/auth/sessions/{id}", "POST /api/v1/auth/password",
	"GET /api/v1/users", "PATCH /api/v1/users/{id}", "POST /api/v1/users/{id}/reset-2fa", "DELETE /api/v1/users/{id}",
	"GET /api/v1/users/invitations", "POST /api/v1/users/invitations", "DELETE /api/v1/users/invitations/{id}",
	"POST /api/v1/platform/recovery-kit", "GET /api/v1/tokens", "POST /api/v1/tokens", "DELETE /api/v1/tokens/{id}",
	"GET /api/v1/notifications", "PUT /api/v1/notifications/settings", "POST /api/v1/notifications/read",
	"POST /api/v1/githost/manifest", "POST /api/v1/githost/manifest/complete", "POST /api/v1/githost/installations",
	"DELETE /api/v1/githost/app", "POST /api/v1/backups/clouddrive/connect", "DELETE /api/v1/backups/clouddrive/connection",
}

// tokenGlobal are the operations a token narrowed to resources may call.
var tokenGlobal = []string{"GET /api/v1/auth/me", "GET /api/v1/tokens/current", "GET /api/v1/platform", "GET /api/v1/databases/engines",
	"POST /api/v1/stream/tickets"}

// tokenNarrowedLists are the lists a token narrowed to resources reads,
// with only the items its resources cover.
var tokenNarrowedLists = []string{"GET /api/v1/servers", "GET /api/v1/applications", "GET /api/v1/deployments", "GET /api/v1/jobs",
	"GET /api/v1/databases", "GET /api/v1/backups", "GET /api/v1/monitoring/alerts"}

// tokenPolicy is the scope an API token needs for an operation and
// whether it needs a session instead.
func tokenPolicy(name string, a access) (string, bool) {
	scope := "read"
	if a == admin {
		scope = "write"
		if strings.HasPrefix(name, "GET ") {
			scope = "admin"
		}
	}
	if s, ok := tokenScopes[name]; ok {
		scope = s
	}
	return scope, slices.Contains(tokenSessionOnly, name)
}

// implies is what each scope allows.
var implies = map[string][]string{
	"read":         {"read"},
	"read:secrets": {"read", "read:secrets"},
	"deploy":       {"read", "deploy"},
	"operate":      {"read", "operate"},
	"write":        {"read", "deploy", "operate", "write"},
	"admin":        {"read", "read:secrets", "deploy", "operate", "write", "admin"},
}

// accessToken is one API token the access test calls every operation
// with.
type accessToken struct {
	name, token string
	scope       string
	member      bool // owned by a member
	narrowed    bool // narrowed to an application no fixture is on
	// hidden are ids of fixtures a narrowed token's lists never show.
	hidden []string
	own    string // the application it is narrowed to
}

// accessTokens makes an administrator's token of each scope, a member's
// read token and an admin token narrowed to another application.
func accessTokens(t *testing.T, r *appRig, memberSession string, fx accessFixtures) []accessToken {
	t.Helper()
	mk := func(session, scope string, resources ...string) string {
		t.Helper()
		resp := r.Post(t, "/api/v1/tokens", session, map[string]any{"name": "access " + scope, "scopes": []string{scope},
			"resources": resources})
		var out struct {
			Token string `json:"token"`
		}
		expectJSON(t, resp, http.StatusCreated, &out)
		return out.Token
	}
	var out []accessToken
	for _, scope := range []string{"read", "read:secrets", "deploy", "operate", "write", "admin"} {
		out = append(out, accessToken{name: "token " + scope, token: mk(r.Token, scope), scope: scope})
	}
	out = append(out, accessToken{name: "member's read token", token: mk(memberSession, "read"), scope: "read", member: true})
	out = append(out, accessToken{name: "admin token for another app", token: mk(r.Token, "admin", "app:"+fx.otherAppID),
		scope: "admin", narrowed: true, own: fx.otherAppID, hidden: []string{fx.appID, fx.failedDeployID, fx.appLogsJobID, fx.serviceJobID,
			fx.databaseID, fx.exportDatabaseID, fx.backupRunID}})
	return out
}

// checkTokens calls one operation with every access token: a token is
// refused (403, with the reason's code) what its scope, its owner's role
// or its resources do not cover and what needs a session, and otherwise
// answered as the administrator was, with secrets only for read:secrets.
func checkTokens(t *testing.T, r *appRig, name string, c routeCase, tokens []accessToken) {
	t.Helper()
	if c.access == public || c.access == agent {
		return
	}
	method, _, _ := strings.Cut(name, " ")
	scope, sessionOnly := tokenPolicy(name, c.access)
	for _, tok := range tokens {
		resp := r.Do(t, Req{Method: method, Path: c.path, Token: tok.token, JSON: c.body})
		what, body := name+" with the "+tok.name, string(resp.Body)
		var want string
		switch {
		case c.access == admin && tok.member:
			want = "admin-required"
		case sessionOnly:
			want = "session-required"
		case !slices.Contains(implies[tok.scope], scope) || (tok.member && scope != "read"):
			want = "token-scope"
		case tok.narrowed && slices.Contains(tokenNarrowedLists, name):
			if resp.Status != http.StatusOK {
				t.Errorf("%s: status %d, want 200 with the items of its application: %s", what, resp.Status, body)
			}
			for _, id := range tok.hidden {
				if id != "" && strings.Contains(body, id) {
					t.Errorf("%s: the list shows %s, which is not the token's application's: %s", what, id, body)
				}
			}
			if name == "GET /api/v1/applications" && !strings.Contains(body, tok.own) {
				t.Errorf("%s: the token's own application %s is not listed: %s", what, tok.own, body)
			}
			continue
		case tok.narrowed && !slices.Contains(tokenGlobal, name):
			want = "token-resource"
		}
		if want != "" {
			if resp.Status != http.StatusForbidden || problemCode(resp) != want {
				t.Errorf("%s: status %d, want 403 %s: %s", what, resp.Status, want, body)
			}
			continue
		}
		switch {
		case c.refusal != 0 && !c.forTokens:
			if resp.Status != c.refusal {
				t.Errorf("%s: status %d, want %d: %s", what, resp.Status, c.refusal, body)
			}
			continue
		case resp.Status == http.StatusUnauthorized || resp.Status == http.StatusForbidden:
			t.Errorf("%s: status %d: %s", what, resp.Status, body)
		case method == http.MethodGet && resp.Status != http.StatusOK:
			t.Errorf("%s: status %d, want 200: %s", what, resp.Status, body)
		}
		secrets := strings.Contains(body, outputMarker) || strings.Contains(body, envMarker)
		switch reads := slices.Contains(implies[tok.scope], "read:secrets") && !tok.member; {
		case secrets && !reads:
			t.Errorf("%s: a token without read:secrets reads job output or a secret value: %s", what, body)
		case !secrets && reads && c.output:
			t.Errorf("%s: the fixtures' output is not in the answer to a token with read:secrets: %s", what, body)
		}
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstan-dev/capstan/internal/store"
)

// TestMCPServer: an assistant's MCP client session (the official SDK's
// client) talks to `capstan mcp` with a token's rights: a read token
// lists the reading tools, reads a server and the database instances,
// and has no deploy or query (an operate token has the query, a
// read:secrets token the log reads); a deploy
// token deploys through the API, audited as the token's with the MCP
// server's user agent; a call the API refuses is a tool error.
func TestMCPServer(t *testing.T) {
	t.Parallel()
	r := newAppRig(t, store.SQLite)
	app := r.createApp(t, map[string]any{"name": "web",
		"source": map[string]any{"type": "image", "image": "ghcr.io/acme/web:1.0"}, "container_port": 8080, "deploy": false})

	session := func(scopes ...string) *mcp.ClientSession {
		t.Helper()
		resp := r.Post(t, "/api/v1/tokens", r.Token, map[string]any{"name": "assistant " + strings.Join(scopes, "+"), "scopes": scopes})
		var tok struct {
			Token string `json:"token"`
		}
		expectJSON(t, resp, http.StatusCreated, &tok)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		cmd := exec.CommandContext(ctx, capstanBin, "mcp")
		cmd.Env = childEnv([]string{"CAPSTAN_URL=" + r.URL, "CAPSTAN_TOKEN=" + tok.Token})
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e-assistant", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connecting to capstan mcp: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	toolNames := func(cs *mcp.ClientSession) []string {
		t.Helper()
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		slices.Sort(names)
		return names
	}
	call := func(cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return err.Error(), true
		}
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return text, res.IsError
	}

	reader := session("read")
	if got := strings.Join(toolNames(reader), " "); got != "get_application get_deployment get_job get_server list_alerts list_applications list_databases list_deployments list_servers" {
		t.Fatalf("a read token's tools: %s", got)
	}
	text, failed := call(reader, "get_server", map[string]any{"id": r.serverID})
	var srv struct {
		ID string `json:"id"`
	}
	if failed || json.Unmarshal([]byte(text), &srv) != nil || srv.ID != r.serverID {
		t.Fatalf("get_server: %v %s", failed, text)
	}
	if text, failed := call(reader, "deploy", map[string]any{"application_id": app.ID}); !failed {
		t.Fatalf("a read token deployed: %s", text)
	}
	text, failed = call(reader, "list_databases", nil)
	var dbs struct {
		Databases []any `json:"databases"`
	}
	if failed || json.Unmarshal([]byte(text), &dbs) != nil || dbs.Databases == nil {
		t.Fatalf("list_databases: %v %s", failed, text)
	}
	// The query tool needs operate, the log tool read:secrets.
	if names := toolNames(session("operate")); !slices.Contains(names, "query_database") || slices.Contains(names, "read_logs") {
		t.Fatalf("an operate token's tools: %v", names)
	}
	if names := toolNames(session("read:secrets")); !slices.Contains(names, "read_logs") || slices.Contains(names, "query_database") {
		t.Fatalf("a read:secrets token's tools: %v", names)
	}

	deployer := session("deploy")
	if names := toolNames(deployer); !slices.Contains(names, "deploy") || slices.Contains(names, "acknowledge_alert") {
		t.Fatalf("a deploy token's tools: %v", names)
	}
	text, failed = call(deployer, "deploy", map[string]any{"application_id": app.ID})
	var dep struct {
		DeploymentID string `json:"deployment_id"`
	}
	if failed || json.Unmarshal([]byte(text), &dep) != nil || dep.DeploymentID == "" {
		t.Fatalf("deploy: %v %s", failed, text)
	}
	var audit struct {
		Entries []struct {
			Actor struct {
				TokenName string `json:"token_name"`
			} `json:"actor"`
			UserAgent string `json:"user_agent"`
		} `json:"entries"`
	}
	r.Get(t, "/api/v1/audit-logs?action=deployment.created&limit=1", r.Token).JSON(t, &audit)
	if len(audit.Entries) != 1 || audit.Entries[0].Actor.TokenName != "assistant deploy" ||
		!strings.HasPrefix(audit.Entries[0].UserAgent, "capstan-mcp/") {
		t.Fatalf("the deployment's audit entry: %+v", audit.Entries)
	}
	// A call the API refuses is a tool error with the problem.
	if text, failed := call(deployer, "get_application", map[string]any{"id": "app_none"}); !failed || !strings.Contains(text, "404") {
		t.Fatalf("get_application of nothing: %v %s", failed, text)
	}
}

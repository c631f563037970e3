package main

import (
	"context"
	"net/http"
	"reflect"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstan-dev/capstan/internal/apiclient"
)

// mcpCmd serves the Model Context Protocol over stdin and stdout for an
// assistant, with an API token's rights: every tool is one API call,
// authorised and audited as the token's (the audit entries carry the
// user agent capstan-mcp/VERSION).
type mcpCmd struct {
	URL   string `name:"url" env:"CAPSTAN_URL" required:"" help:"The control plane's URL."`
	Token string `name:"token" env:"CAPSTAN_TOKEN" required:"" help:"The API token (cpt_…) whose rights the assistant gets."`
}

type idArg struct {
	ID string `json:"id" jsonschema:"the id"`
}

type listAppsArg struct {
	ServerID string `json:"server_id,omitempty" jsonschema:"only this server's applications (srv_…)"`
}

type listDeploymentsArg struct {
	Limit int64 `json:"limit,omitempty" jsonschema:"how many, newest first: 1 to 100 (default 30)"`
}

type listAlertsArg struct {
	State string `json:"state,omitempty" jsonschema:"open (default), resolved or all"`
}

type readLogsArg struct {
	ApplicationID string `json:"application_id" jsonschema:"the application (app_…)"`
	Lines         int64  `json:"lines,omitempty" jsonschema:"how many of the latest lines: 1 to 1000 (default 200)"`
	Since         string `json:"since,omitempty" jsonschema:"only lines at or after this RFC 3339 time"`
}

type queryArg struct {
	InstanceID string `json:"instance_id" jsonschema:"the database instance (its id from list_databases)"`
	SQL        string `json:"sql" jsonschema:"one SQL statement"`
	Database   string `json:"database,omitempty" jsonschema:"the database to run it in; default the instance's initial one"`
	MaxRows    int64  `json:"max_rows,omitempty" jsonschema:"at most this many rows: 1 to 1000 (default 100)"`
}

type deployArg struct {
	ApplicationID string `json:"application_id" jsonschema:"the application (app_…)"`
	Ref           string `json:"ref,omitempty" jsonschema:"an image reference, or for git sources a branch, tag or commit; default the application's"`
}

func (m mcpCmd) Run(ctx context.Context) error {
	clientName = "capstan-mcp"
	c, err := connect(ctx, ClientFlags{URL: m.URL, Token: m.Token})
	if err != nil {
		return err
	}
	cur, err := c.api.CurrentTokenWithResponse(ctx)
	if err != nil {
		return err
	}
	if err := check(cur.HTTPResponse, cur.Body, "reading what the token may do"); err != nil {
		return err
	}
	var allowed []string
	if cur.JSON200.Allowed != nil {
		allowed = *cur.JSON200.Allowed
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "capstan", Version: version}, nil)
	read := func(name, desc string) *mcp.Tool {
		return &mcp.Tool{Name: name, Description: desc, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}
	}
	mcp.AddTool(s, read("list_servers", "List the servers of the fleet with their state, facts and latest metrics."),
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return answer(c.api.ListServersWithResponse(ctx))
		})
	mcp.AddTool(s, read("get_server", "Read one server: its state, facts, inventory and latest metrics."),
		func(ctx context.Context, _ *mcp.CallToolRequest, in idArg) (*mcp.CallToolResult, any, error) {
			return answer(c.api.GetServerWithResponse(ctx, in.ID))
		})
	mcp.AddTool(s, read("list_applications", "List applications, optionally of one server."),
		func(ctx context.Context, _ *mcp.CallToolRequest, in listAppsArg) (*mcp.CallToolResult, any, error) {
			p := &apiclient.ListApplicationsParams{}
			if in.ServerID != "" {
				p.ServerId = &in.ServerID
			}
			return answer(c.api.ListApplicationsWithResponse(ctx, p))
		})
	mcp.AddTool(s, read("get_application", "Read one application with its current and latest deployments (environment values are never included)."),
		func(ctx context.Context, _ *mcp.CallToolRequest, in idArg) (*mcp.CallToolResult, any, error) {
			no := false
			return answer(c.api.GetApplicationWithResponse(ctx, in.ID, &apiclient.GetApplicationParams{Reveal: &no}))
		})
	mcp.AddTool(s, read("list_deployments", "List the newest deployments of every application."),
		func(ctx context.Context, _ *mcp.CallToolRequest, in listDeploymentsArg) (*mcp.CallToolResult, any, error) {
			p := &apiclient.ListDeploymentsParams{}
			if in.Limit != 0 {
				p.Limit = &in.Limit
			}
			return answer(c.api.ListDeploymentsWithResponse(ctx, p))
		})
	mcp.AddTool(s, read("get_deployment", "Read one deployment: its state, spec, result and (with read:secrets) its events and log tail."),
		func(ctx context.Context, _ *mcp.CallToolRequest, in idArg) (*mcp.CallToolResult, any, error) {
			return answer(c.api.GetDeploymentWithResponse(ctx, in.ID))
		})
	mcp.AddTool(s, read("get_job", "Read one job: its state and (with read:secrets) its events, output and error."),
		func(ctx context.Context, _ *mcp.CallToolRequest, in idArg) (*mcp.CallToolResult, any, error) {
			return answer(c.api.GetJobWithResponse(ctx, in.ID, &apiclient.GetJobParams{}))
		})
	mcp.AddTool(s, read("list_alerts", "List alerts: open ones by default."),
		func(ctx context.Context, _ *mcp.CallToolRequest, in listAlertsArg) (*mcp.CallToolResult, any, error) {
			p := &apiclient.ListAlertsParams{}
			if in.State != "" {
				st := apiclient.ListAlertsParamsState(in.State)
				p.State = &st
			}
			return answer(c.api.ListAlertsWithResponse(ctx, p))
		})
	mcp.AddTool(s, read("list_databases", "List the database instances: engine, version, state, server and logins (never passwords)."),
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return answer(c.api.ListDatabasesWithResponse(ctx))
		})
	// Log lines are job output, which may hold secrets: the read needs
	// read:secrets.
	if slices.Contains(allowed, "read:secrets") {
		mcp.AddTool(s, read("read_logs", "Read an application's latest log lines (its live container's, or its live unit's journal), with the container's state and restart count."),
			func(ctx context.Context, _ *mcp.CallToolRequest, in readLogsArg) (*mcp.CallToolResult, any, error) {
				body := apiclient.ReadApplicationLogsJSONRequestBody{}
				if in.Lines != 0 {
					body.Lines = &in.Lines
				}
				if in.Since != "" {
					body.Since = &in.Since
				}
				r, err := c.api.ReadApplicationLogsWithResponse(ctx, in.ApplicationID, body)
				if err != nil || r.JSON202 == nil {
					return answer(r, err)
				}
				if res, err := jobEnd(ctx, c, r.JSON202.JobId); res != nil || err != nil {
					return res, nil, err
				}
				return answer(c.api.GetApplicationLogsWithResponse(ctx, in.ApplicationID, r.JSON202.JobId))
			})
	}
	// Changes only where the token has their scope.
	if slices.Contains(allowed, "deploy") {
		mcp.AddTool(s, &mcp.Tool{Name: "deploy", Description: "Deploy an application: its configured source, or the given ref. Answers the queued deployment; follow it with get_deployment."},
			func(ctx context.Context, _ *mcp.CallToolRequest, in deployArg) (*mcp.CallToolResult, any, error) {
				body := apiclient.DeployApplicationJSONRequestBody{}
				if in.Ref != "" {
					body.Ref = &in.Ref
				}
				return answer(c.api.DeployApplicationWithResponse(ctx, in.ApplicationID, body))
			})
		mcp.AddTool(s, &mcp.Tool{Name: "rollback", Description: "Roll an application back to the release of an earlier succeeded deployment (its id)."},
			func(ctx context.Context, _ *mcp.CallToolRequest, in idArg) (*mcp.CallToolResult, any, error) {
				return answer(c.api.RollbackDeploymentWithResponse(ctx, in.ID))
			})
	}
	if slices.Contains(allowed, "operate") {
		// The query endpoint needs operate, as it can write; this tool
		// asks it for a read-only transaction, which the engine enforces.
		mcp.AddTool(s, read("query_database", "Run one read-only SQL statement on a database instance and answer its columns and rows: the engine itself keeps the transaction read-only, so a statement that writes fails with the engine's error."),
			func(ctx context.Context, _ *mcp.CallToolRequest, in queryArg) (*mcp.CallToolResult, any, error) {
				readonly := true
				body := apiclient.QueryDatabaseJSONRequestBody{Sql: in.SQL, Readonly: &readonly}
				if in.Database != "" {
					body.Database = &in.Database
				}
				if in.MaxRows != 0 {
					body.MaxRows = &in.MaxRows
				}
				r, err := c.api.QueryDatabaseWithResponse(ctx, in.InstanceID, body)
				if err != nil || r.JSON202 == nil {
					return answer(r, err)
				}
				wait := int64(30)
				for {
					g, err := c.api.GetDatabaseJobWithResponse(ctx, in.InstanceID, r.JSON202.JobId, &apiclient.GetDatabaseJobParams{Wait: &wait})
					if err != nil || g.JSON200 == nil || terminal(string(g.JSON200.Status)) {
						return answer(g, err)
					}
				}
			})
		mcp.AddTool(s, &mcp.Tool{Name: "acknowledge_alert", Description: "Acknowledge an open alert (its id)."},
			func(ctx context.Context, _ *mcp.CallToolRequest, in idArg) (*mcp.CallToolResult, any, error) {
				return answer(c.api.AcknowledgeAlertWithResponse(ctx, in.ID))
			})
	}
	return s.Run(ctx, &mcp.StdioTransport{})
}

// jobEnd waits, with the API's own wait, until the job jobID ended; a
// result when the wait itself failed (the job ended otherwise).
func jobEnd(ctx context.Context, c *conn, jobID string) (*mcp.CallToolResult, error) {
	wait := int64(30)
	for {
		g, err := c.api.GetJobWithResponse(ctx, jobID, &apiclient.GetJobParams{Wait: &wait})
		if err != nil || g.JSON200 == nil {
			res, _, err := answer(g, err)
			return res, err
		}
		if terminal(string(g.JSON200.Status)) {
			return nil, nil
		}
	}
}

// answer is a tool's result: the API's JSON answer, or its problem as a
// tool error the assistant reads.
func answer[R apiAnswer](r R, err error) (*mcp.CallToolResult, any, error) {
	if err != nil {
		return nil, nil, err
	}
	body, resp := responseOf(r)
	if resp == nil || resp.StatusCode/100 != 2 {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: problemText(resp, body)}}}, nil, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(body)}}}, nil, nil
}

// responseOf reads the Body and HTTPResponse fields every generated
// response has.
func responseOf(r any) ([]byte, *http.Response) {
	v := reflect.ValueOf(r).Elem()
	resp, _ := v.FieldByName("HTTPResponse").Interface().(*http.Response)
	return v.FieldByName("Body").Bytes(), resp
}

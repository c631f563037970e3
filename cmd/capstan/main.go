// Command capstan is the Capstan control plane: the API server, schema
// migrations, user administration and recovery-kit tools.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// StoreFlags are shared by every subcommand that opens the store.
type StoreFlags struct {
	DataDir     string `name:"data-dir" env:"CAPSTAN_DATA_DIR" default:"./data" help:"Directory for the SQLite database, the secret key and artifacts (created 0700)."`
	DatabaseURL string `name:"database-url" env:"CAPSTAN_DATABASE_URL" help:"Empty: SQLite file capstan.db in the data dir. postgres://…: PostgreSQL."`
}

type cli struct {
	Serve       serveCmd       `cmd:"" help:"Run the control plane."`
	Migrate     migrateCmd     `cmd:"" help:"Apply pending schema migrations and exit."`
	User        userCmd        `cmd:"" help:"Manage users."`
	RecoveryKit recoveryKitCmd `cmd:"" name:"recovery-kit" help:"Recovery kit tools."`
	Notify      notifyCmd      `cmd:"" help:"Notification tools."`
	Version     versionCmd     `cmd:"" help:"Print the version."`
	OpenAPI     openapiCmd     `cmd:"" name:"openapi" help:"Print the OpenAPI document of the API (the one served at /openapi.json)."`

	// The client: the same binary talks to a control plane's API.
	Login       loginCmd       `cmd:"" group:"client" help:"Sign in to a control plane with a password and a code; later commands use the session."`
	Servers     serversCmd     `cmd:"" group:"client" help:"Servers: list, show, enroll and revoke."`
	Apps        appsCmd        `cmd:"" group:"client" help:"Applications."`
	Deployments deploymentsCmd `cmd:"" group:"client" help:"Deployments of applications."`
	Jobs        jobsCmd        `cmd:"" group:"client" help:"Jobs."`
	Logs        logsCmd        `cmd:"" group:"client" help:"Print an application's log lines (or a unit's or container's on a server); --follow for new ones."`
	DB          dbCmd          `cmd:"" name:"db" group:"client" help:"Database instances: queries, exports and imports."`
	Backups     backupsCmd     `cmd:"" group:"client" help:"Database backups: run, verify and restore."`
	Alerts      alertsCmd      `cmd:"" group:"client" help:"Alerts: list and acknowledge."`
	Tokens      tokensCmd      `cmd:"" group:"client" help:"API tokens: list, make and revoke."`
	Audit       auditCmd       `cmd:"" group:"client" help:"The audit log."`
	MCP         mcpCmd         `cmd:"" name:"mcp" group:"client" help:"Serve the Model Context Protocol on stdin and stdout for an assistant, with an API token's rights."`
}

type versionCmd struct{}

func (versionCmd) Run() error {
	fmt.Println(version)
	return nil
}

func main() {
	var c cli
	kctx := kong.Parse(&c,
		kong.Name("capstan"),
		kong.Description("Capstan: a self-hosted control plane for a fleet of Linux servers."),
		kong.UsageOnError(),
		// A command line that does not parse exits 2, as the client's
		// documented codes say.
		kong.Exit(func(code int) {
			if code != 0 {
				code = exitUsage
			}
			os.Exit(code)
		}),
	)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kctx.BindTo(ctx, (*context.Context)(nil))
	if err := kctx.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "capstan:", err)
		var e *exitError
		if errors.As(err, &e) {
			os.Exit(e.code)
		}
		os.Exit(exitFailed)
	}
}

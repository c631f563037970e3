// Command capstan-agent runs on every server managed by Capstan. It enrolls
// with a one-time token, then calls the control plane (outbound only) to
// send heartbeats and to claim and run jobs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/deploy"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// configFlag is the --config flag shared by the subcommands.
type configFlag struct {
	Config string `name:"config" env:"CAPSTAN_AGENT_CONFIG" default:"/etc/capstan/agent.json" type:"path" help:"Agent configuration file (holds the agent's credential; written 0600)."`
}

type cli struct {
	Run     runCmd     `cmd:"" help:"Run the agent: heartbeats, job claims and execution."`
	Enroll  enrollCmd  `cmd:"" help:"Enroll this server with a control plane using a one-time token."`
	Status  statusCmd  `cmd:"" help:"Show the enrolment and the host facts."`
	Version versionCmd `cmd:"" help:"Print the version."`
	// AppHelper runs as root under capstan-app-helper@.service only.
	AppHelper appHelperCmd `cmd:"" name:"app-helper" hidden:"" help:"Carry out the agent's request for a service application (run as root by capstan-app-helper@.service)."`
}

type appHelperCmd struct {
	StateDir string `name:"state-dir" default:"/var/lib/capstan-agent" type:"path" help:"The agent's state directory."`
	Name     string `arg:"" help:"The application's name."`
}

func (c appHelperCmd) Run(ctx context.Context) error {
	return deploy.RunHelper(ctx, deploy.HelperPaths{StateDir: c.StateDir}, c.Name)
}

// stdio are the streams of a command.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

type versionCmd struct{}

func (versionCmd) Run(io stdio) error {
	fmt.Fprintln(io.out, version)
	return nil
}

// kongExit carries kong's exit status (help, usage errors) out of a panic.
type kongExit int

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the command line args and returns the process exit status:
// 0, 1 on errors, agentproto.ExitRevoked when the control plane revoked
// the agent, or kong's status for usage errors.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("capstan-agent"),
		kong.Description("Capstan agent: runs on a managed server and executes the control plane's jobs."),
		kong.UsageOnError(),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(kongExit(code)) }),
		kong.BindTo(ctx, (*context.Context)(nil)),
		kong.Bind(stdio{in: stdin, out: stdout, err: stderr}),
	)
	if err != nil {
		fmt.Fprintln(stderr, "capstan-agent:", err)
		return 1
	}
	defer func() {
		if p := recover(); p != nil {
			k, ok := p.(kongExit)
			if !ok {
				panic(p)
			}
			code = int(k)
		}
	}()
	kctx, err := parser.Parse(args)
	if err != nil {
		parser.FatalIfErrorf(err)
		return 1
	}
	return exitCode(stderr, kctx.Run())
}

// exitCode reports err and maps it to the exit status.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "capstan-agent:", err)
	if errors.Is(err, agent.ErrRevoked) {
		return agentproto.ExitRevoked
	}
	return 1
}

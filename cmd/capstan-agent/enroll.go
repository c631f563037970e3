package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

type enrollCmd struct {
	configFlag
	URL   string `name:"url" required:"" env:"CAPSTAN_URL" help:"Control plane URL, e.g. https://capstan.example.com."`
	Token string `name:"token" required:"" env:"CAPSTAN_ENROLL_TOKEN" help:"One-time enrollment token (ept_…), or - to read it from the first line of stdin. Prefer the environment variable or stdin: a command line is visible to every user of the host (ps)."`
	Force bool   `name:"force" help:"Replace an existing enrollment."`
}

func (e *enrollCmd) Run(ctx context.Context, io stdio) error {
	apiURL, err := agent.ParseAPIURL(e.URL)
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	if e.Token == "-" {
		if e.Token, err = readToken(io.in); err != nil {
			return err
		}
	}
	if !strings.HasPrefix(e.Token, agentproto.EnrollmentTokenPrefix) {
		return fmt.Errorf("--token: an enrollment token starts with %q", agentproto.EnrollmentTokenPrefix)
	}
	// Check everything local before spending the one-time token.
	if !e.Force {
		old, err := agent.LoadConfig(e.Config)
		switch {
		case err == nil:
			return fmt.Errorf("already enrolled as %s (%s) with %s; config %s kept (use --force to enroll again)",
				old.ServerName, old.ServerID, old.APIURL, e.Config)
		case !errors.Is(err, agent.ErrNotEnrolled):
			return fmt.Errorf("%w; not overwriting it (use --force to replace it)", err)
		}
	}
	if err := agent.CheckWritable(e.Config); err != nil {
		return err
	}
	if u, _ := url.Parse(apiURL); u.Scheme == "http" && !isLoopback(u.Hostname()) {
		fmt.Fprintln(io.err, "capstan-agent: warning: the control plane URL is not https; the agent's credential will travel unencrypted")
	}
	client, err := agent.NewClient(apiURL, "", version, nil, nil)
	if err != nil {
		return err
	}
	facts := agent.CollectFacts(version)
	facts.JobTypes = executors().Types()
	resp, err := client.Enroll(ctx, agentproto.EnrollRequest{Token: e.Token, Facts: facts})
	if err != nil {
		var ae *agent.APIError
		if errors.As(err, &ae) && ae.Problem.Type == agentproto.ProblemInvalidEnrollmentToken {
			return errors.New("enrollment refused: the token is unknown, already used or expired; create a new one on the control plane")
		}
		return fmt.Errorf("enrollment failed: %w", err)
	}
	if resp.ServerID == "" || !strings.HasPrefix(resp.AgentToken, agentproto.AgentTokenPrefix) {
		return errors.New("enrollment failed: the control plane's reply has no server id or agent token")
	}
	cfg := agent.Config{
		APIURL:           apiURL,
		ServerID:         resp.ServerID,
		ServerName:       resp.ServerName,
		AgentToken:       resp.AgentToken,
		HeartbeatSeconds: resp.HeartbeatSeconds,
		MetricsSeconds:   resp.MetricsSeconds,
	}
	if err := agent.SaveConfig(e.Config, cfg); err != nil {
		return fmt.Errorf("enrolled as %s (%s) but %w; the token is spent, create a new one", resp.ServerName, resp.ServerID, err)
	}
	fmt.Fprintf(io.out, "Enrolled as %s (%s) with %s.\nConfiguration written to %s.\nStart the agent: capstan-agent run --config %s\n",
		resp.ServerName, resp.ServerID, apiURL, e.Config, shellWord(e.Config))
	return nil
}

// maxTokenLine bounds the line a token is read from.
const maxTokenLine = 4096

// readToken reads the enrollment token from the first line of r, without
// the spaces around it.
func readToken(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, maxTokenLine)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the enrollment token from stdin: %w", err)
	}
	tok := strings.TrimSpace(line)
	if tok == "" {
		return "", errors.New("--token -: stdin has no enrollment token")
	}
	return tok, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// shellWord quotes s for a shell command line when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

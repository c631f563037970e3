package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

type statusCmd struct {
	configFlag
	StateDir string `name:"state-dir" env:"CAPSTAN_AGENT_STATE_DIR" default:"/var/lib/capstan-agent" type:"path" help:"The agent's state directory, where the running agent notes when it last reached the control plane."`
	JSON     bool   `name:"json" help:"Print JSON."`
}

// statusReport is the output of status --json. It never holds the token.
type statusReport struct {
	Enrolled         bool             `json:"enrolled"`
	ConfigPath       string           `json:"config_path"`
	APIURL           string           `json:"api_url,omitempty"`
	ServerID         string           `json:"server_id,omitempty"`
	ServerName       string           `json:"server_name,omitempty"`
	HeartbeatSeconds int              `json:"heartbeat_seconds,omitempty"`
	MetricsSeconds   int              `json:"metrics_seconds,omitempty"`
	Facts            agentproto.Facts `json:"facts"`
	// Running says whether an agent process runs with this state
	// directory; Contact is what it last noted (nil when it never ran).
	Running bool           `json:"running"`
	Contact *agent.Contact `json:"contact"`
}

func (s *statusCmd) Run(io stdio) error {
	cfg, loadErr := agent.LoadConfig(s.Config)
	r := statusReport{
		Enrolled:   loadErr == nil,
		ConfigPath: s.Config,
		Facts:      agent.CollectFacts(version),
	}
	if loadErr == nil {
		r.APIURL, r.ServerID, r.ServerName = cfg.APIURL, cfg.ServerID, cfg.ServerName
		r.HeartbeatSeconds, r.MetricsSeconds = cfg.HeartbeatSeconds, cfg.MetricsSeconds
	}
	if c, running, err := agent.ReadContact(s.StateDir); err == nil {
		r.Contact, r.Running = &c, running
	}
	if s.JSON {
		enc := json.NewEncoder(io.out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		w := tabwriter.NewWriter(io.out, 0, 0, 2, ' ', 0)
		if loadErr == nil {
			fmt.Fprintf(w, "Control plane:\t%s\n", r.APIURL)
			fmt.Fprintf(w, "Server:\t%s (%s)\n", r.ServerName, r.ServerID)
		} else {
			fmt.Fprintf(w, "Enrolled:\tno\n")
		}
		fmt.Fprintf(w, "Config:\t%s\n", r.ConfigPath)
		fmt.Fprintf(w, "Agent:\t%s\n", runningLine(r, time.Now()))
		fmt.Fprintf(w, "Control plane reached:\t%s\n", contactLine(r.Contact, time.Now()))
		f := r.Facts
		fmt.Fprintf(w, "Hostname:\t%s\n", f.Hostname)
		fmt.Fprintf(w, "OS:\t%s %s\n", f.OS, f.OSVersion)
		fmt.Fprintf(w, "Kernel:\t%s\n", f.Kernel)
		fmt.Fprintf(w, "Hardware:\t%s, %d CPUs, %.1f GiB memory\n", f.Arch, f.CPUCount, float64(f.MemoryBytes)/(1<<30))
		fmt.Fprintf(w, "Public addresses:\t%s\n", orNone(f.PublicAddresses))
		fmt.Fprintf(w, "Private addresses:\t%s\n", orNone(f.PrivateAddresses))
		fmt.Fprintf(w, "Agent version:\t%s\n", f.AgentVersion)
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if loadErr != nil {
		return loadErr
	}
	return nil
}

// runningLine says whether the agent runs, and since when.
func runningLine(r statusReport, now time.Time) string {
	switch {
	case r.Contact == nil:
		return "not running (it never ran with this state directory)"
	case !r.Running:
		return fmt.Sprintf("not running (pid %d, started %s, has ended)", r.Contact.PID, r.Contact.StartedAt.Format(time.RFC3339))
	}
	return fmt.Sprintf("running, pid %d, version %s, for %s", r.Contact.PID, r.Contact.Version, agoText(now, r.Contact.StartedAt))
}

// contactLine says when the agent last reached the control plane, and
// why its last attempt failed if it did.
func contactLine(c *agent.Contact, now time.Time) string {
	if c == nil {
		return "never"
	}
	out := "never"
	if !c.LastContactAt.IsZero() {
		out = fmt.Sprintf("%s ago (%s)", agoText(now, c.LastContactAt), c.LastContactAt.Format(time.RFC3339))
	}
	if c.LastError != "" {
		out += fmt.Sprintf("; the last attempt, %s ago, failed: %s", agoText(now, c.LastErrorAt), c.LastError)
	}
	return out
}

func agoText(now, t time.Time) string {
	return max(now.Sub(t), 0).Round(time.Second).String()
}

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

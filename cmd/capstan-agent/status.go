package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

type statusCmd struct {
	configFlag
	JSON bool `name:"json" help:"Print JSON."`
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

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

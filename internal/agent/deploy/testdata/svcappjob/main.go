// svcappjob runs app.deploy, app.logs and app.remove of service
// applications the way capstan-agent does, inside a systemd host, and is
// the root helper of its capstan-app-helper@.service:
//
//	svcappjob job JOB-JSON SECRETS-JSON PROXY-SETTINGS-JSON
//	svcappjob helper NAME
//
// job prints {"data":…,"error":"…","events":[…]}.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/deploy"
	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agent/service"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

type event struct {
	Level   string `json:"level"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

type sink struct {
	mu     sync.Mutex
	events []event
}

func (s *sink) Emit(level, message string, data any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, event{level, message, data})
}

type outcome struct {
	Data   any     `json:"data"`
	Error  string  `json:"error,omitempty"`
	Events []event `json:"events"`
}

const stateDir = "/var/lib/capstan-agent"

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if len(os.Args) == 3 && os.Args[1] == "helper" {
		if err := deploy.RunHelper(ctx, deploy.HelperPaths{StateDir: stateDir}, os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "svcappjob helper:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 5 || os.Args[1] != "job" {
		fmt.Fprintln(os.Stderr, "usage: svcappjob job JOB SECRETS PROXY | svcappjob helper NAME")
		os.Exit(2)
	}
	var job agentproto.Job
	var secrets map[string]string
	var ps proxy.Settings
	for i, v := range []any{&job, &secrets, &ps} {
		if err := json.Unmarshal([]byte(os.Args[2+i]), v); err != nil {
			fmt.Fprintln(os.Stderr, "svcappjob:", err)
			os.Exit(2)
		}
	}
	opts := deploy.Options{StateDir: stateDir, Journal: &service.Systemd{}, Drain: 300 * time.Millisecond}
	var px *proxy.Proxy
	if ps.AdminURL != "" {
		px = proxy.New(ps, nil)
		opts.Proxy = px
	}
	d := deploy.New(opts)
	if px != nil {
		px.OtherUpstreams(d.LiveServiceUpstreams)
	}
	r := agent.Registry{}
	d.Register(r)
	ex, ok := r[job.Type]
	if !ok {
		fmt.Fprintln(os.Stderr, "svcappjob: unknown job type", job.Type)
		os.Exit(2)
	}
	s := &sink{}
	data, _, err := ex.Run(ctx, job, secrets, s)
	out := outcome{Data: data, Events: s.events}
	if err != nil {
		out.Error = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "svcappjob:", err)
		os.Exit(1)
	}
}

// svcjob runs one service job or journal read the way capstan-agent does
// and prints its outcome as JSON. The service tests copy it into a systemd
// container and run it there:
//
//	svcjob '{"type":"service.start","payload":{"unit":"x.service"}}'
//
// prints {"data":…,"error":"…","events":[…]}.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/logs"
	"github.com/capstan-dev/capstan/internal/agent/service"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

type event struct {
	Level   string `json:"level"`
	Message string `json:"message"`
}

type sink struct {
	mu     sync.Mutex
	events []event
}

func (s *sink) Emit(level, message string, _ any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, event{level, message})
}

type outcome struct {
	Data   any     `json:"data"`
	Error  string  `json:"error,omitempty"`
	Events []event `json:"events"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: svcjob JOB-JSON")
		os.Exit(2)
	}
	var job agentproto.Job
	if err := json.Unmarshal([]byte(os.Args[1]), &job); err != nil {
		fmt.Fprintln(os.Stderr, "svcjob:", err)
		os.Exit(2)
	}
	sd := &service.Systemd{}
	r := agent.Registry{}
	sd.Register(r)
	logs.Readers{Journal: sd}.Register(r)
	ex, ok := r[job.Type]
	if !ok {
		fmt.Fprintln(os.Stderr, "svcjob: unknown job type", job.Type)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := &sink{}
	data, _, err := ex.Run(ctx, job, nil, s)
	out := outcome{Data: data, Events: s.events}
	if err != nil {
		out.Error = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "svcjob:", err)
		os.Exit(1)
	}
}

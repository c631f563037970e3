package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// availability follows which agents are cut off from the control plane: an
// agent goes down at its first failed call and comes back at its next
// successful one. Per second of the run it counts the failed calls, the
// agents that went down and those that came back, so that a restart of the
// control plane shows as a curve.
type availability struct {
	start time.Time

	mu        sync.Mutex // guards everything below
	down      int
	maxDown   int
	seconds   []SecondCounts
	allBackAt []time.Time // when the last agent down came back, each time
}

// SecondCounts is one second of the availability curve.
type SecondCounts struct {
	Second    int `json:"second"`
	Errors    int `json:"errors"`
	WentDown  int `json:"went_down"`
	CameBack  int `json:"came_back"`
	AgentsOut int `json:"agents_out_max" doc:"most agents down at once during the second"`
}

func newAvailability(start time.Time) *availability { return &availability{start: start} }

func (v *availability) at(t time.Time) *SecondCounts {
	sec := max(int(t.Sub(v.start)/time.Second), 0)
	for len(v.seconds) <= sec {
		v.seconds = append(v.seconds, SecondCounts{Second: len(v.seconds), AgentsOut: max(v.down, 0)})
	}
	return &v.seconds[sec]
}

// failed records a failed call of an agent; wasUp tells whether the agent
// was up before it.
func (v *availability) failed(t time.Time, wasUp bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c := v.at(t)
	c.Errors++
	if wasUp {
		v.down++
		v.maxDown = max(v.maxDown, v.down)
		c.WentDown++
		c.AgentsOut = max(c.AgentsOut, v.down)
	}
}

// back records the first successful call of an agent that was down.
func (v *availability) back(t time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c := v.at(t)
	v.down--
	c.CameBack++
	if v.down == 0 {
		v.allBackAt = append(v.allBackAt, t)
	}
}

// curve returns the seconds from..to (inclusive) of the run.
func (v *availability) curve(from, to int) []SecondCounts {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := []SecondCounts{}
	for s := max(from, 0); s <= to && s < len(v.seconds); s++ {
		out = append(out, v.seconds[s])
	}
	return out
}

// agentsDown returns how many agents are down now and the most that were.
func (v *availability) agentsDown() (now, most int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.down, v.maxDown
}

// Restart is what a kill and restart of the control plane during the run
// did to the fleet.
type Restart struct {
	URL             string         `json:"url,omitempty" doc:"with several control planes, the one killed and restarted"`
	AgentsOnIt      int            `json:"agents_on_it,omitempty" doc:"with several control planes, the simulated agents that talk to the one killed"`
	KilledAtS       float64        `json:"killed_at_s" doc:"seconds into the run when the control plane was killed with SIGKILL"`
	RestartedAtS    float64        `json:"restarted_at_s" doc:"when the restart command was started"`
	NewPID          int            `json:"new_pid"`
	AgentsDownMax   int            `json:"agents_down_max"`
	AllBack         bool           `json:"all_back"`
	AllBackAfterS   float64        `json:"all_back_after_s" doc:"from the restart until the first moment no agent was cut off"`
	ErrorsTotal     int            `json:"errors_total" doc:"failed calls from the kill until every agent was back (or the end of the run)"`
	ErrorsPeakPerS  int            `json:"errors_peak_per_s"`
	BackPeakPerS    int            `json:"back_peak_per_s"`
	AgentsDownAtEnd int            `json:"agents_down_at_end" doc:"agents whose last call failed when the run ended"`
	Curve           []SecondCounts `json:"curve" doc:"per second from the kill until every agent was back"`
}

// restarter kills the control plane at a moment of the run and starts it
// again with a shell command.
type restarter struct {
	cmd  string
	log  io.Writer
	proc *exec.Cmd

	killedAt, restartedAt time.Time
	newPID                int
}

// killAndRestart sends SIGKILL to pid, waits until the process is gone and
// runs the restart command (through sh -c; it should exec the control
// plane so that its process id is the control plane's).
func (r *restarter) killAndRestart(ctx context.Context, pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	r.killedAt = time.Now()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing the control plane (pid %d): %w", pid, err)
	}
	// A child of ours is reaped by Wait; any other process is gone when
	// signal 0 fails.
	if r.proc != nil && r.proc.Process.Pid == pid {
		r.proc.Wait() //nolint:errcheck // killed on purpose
	} else {
		for p.Signal(syscall.Signal(0)) == nil {
			if !sleep(ctx, 10*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	c := exec.Command("sh", "-c", r.cmd)
	c.Stdout, c.Stderr = r.log, r.log
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return fmt.Errorf("restart command: %w", err)
	}
	r.proc, r.restartedAt, r.newPID = c, time.Now(), c.Process.Pid
	return nil
}

func (r *restarter) report(start time.Time, v *availability) *Restart {
	if r.killedAt.IsZero() {
		return nil
	}
	out := &Restart{KilledAtS: r.killedAt.Sub(start).Seconds(), RestartedAtS: r.restartedAt.Sub(start).Seconds(), NewPID: r.newPID}
	down, _ := v.agentsDown()
	out.AgentsDownAtEnd = down
	// Every agent is back the first time after the kill that none is
	// down; failures later (of a loaded machine, say) are not the
	// restart's.
	v.mu.Lock()
	var backAt time.Time
	for _, t := range v.allBackAt {
		if t.After(r.killedAt) {
			backAt = t
			break
		}
	}
	v.mu.Unlock()
	from := int(r.killedAt.Sub(start) / time.Second)
	to := int(time.Since(start) / time.Second)
	if !backAt.IsZero() {
		out.AllBack = true
		out.AllBackAfterS = backAt.Sub(r.restartedAt).Seconds()
		to = int(backAt.Sub(start) / time.Second)
	}
	out.Curve = v.curve(from, to)
	for _, c := range out.Curve {
		out.ErrorsTotal += c.Errors
		out.ErrorsPeakPerS = max(out.ErrorsPeakPerS, c.Errors)
		out.BackPeakPerS = max(out.BackPeakPerS, c.CameBack)
		out.AgentsDownMax = max(out.AgentsDownMax, c.AgentsOut)
	}
	return out
}

func (r *Restart) write(w io.Writer) {
	what := "restart"
	if r.URL != "" {
		what = fmt.Sprintf("restart of %s (%d agents on it)", r.URL, r.AgentsOnIt)
	}
	fmt.Fprintf(w, "%s: killed at %.1fs, restarted at %.1fs (new pid %d); %d agents cut off at most; ",
		what, r.KilledAtS, r.RestartedAtS, r.NewPID, r.AgentsDownMax)
	if r.AllBack {
		fmt.Fprintf(w, "all back %.1fs after the restart", r.AllBackAfterS)
	} else {
		fmt.Fprintf(w, "%d agents still cut off at the end", r.AgentsDownAtEnd)
	}
	fmt.Fprintf(w, "; %d failed calls (peak %d/s), agents back peak %d/s\n", r.ErrorsTotal, r.ErrorsPeakPerS, r.BackPeakPerS)
	fmt.Fprintln(w, "  second  errors  went-down  came-back  most-out")
	for _, c := range r.Curve {
		if c.Errors == 0 && c.WentDown == 0 && c.CameBack == 0 {
			continue
		}
		fmt.Fprintf(w, "  %6s  %6d  %9d  %9d  %8d\n", strconv.Itoa(c.Second), c.Errors, c.WentDown, c.CameBack, c.AgentsOut)
	}
}

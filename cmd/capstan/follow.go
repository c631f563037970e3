package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/apiclient"
)

// streamMessage is one message of the live stream.
type streamMessage struct {
	ID    string
	Event string
	Data  []byte
}

// liveStream reads the control plane's live stream, reconnecting with a
// new ticket (and the last message's id) when it ends.
type liveStream struct {
	c      *conn
	last   string
	body   io.ReadCloser
	reader *bufio.Reader
}

// open takes a ticket and opens the stream after the last message seen.
func (s *liveStream) open(ctx context.Context) error {
	t, err := s.c.api.CreateStreamTicketWithResponse(ctx)
	if err != nil {
		return err
	}
	if err := check(t.HTTPResponse, t.Body, "opening the live stream"); err != nil {
		return err
	}
	q := url.Values{"ticket": {t.JSON201.Ticket}}
	if s.last != "" {
		q.Set("last_event_id", s.last)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.c.base+"/api/v1/stream?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := s.c.http.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return check(resp, b, "opening the live stream")
	}
	s.body, s.reader = resp.Body, bufio.NewReaderSize(resp.Body, 64<<10)
	return nil
}

// next returns the next message, reopening the stream when it ended.
func (s *liveStream) next(ctx context.Context) (streamMessage, error) {
	var m streamMessage
	for {
		if s.reader == nil {
			if err := s.open(ctx); err != nil {
				return m, err
			}
		}
		line, err := s.reader.ReadString('\n')
		if err != nil {
			s.close()
			if ctx.Err() != nil {
				return m, ctx.Err()
			}
			continue // the stream ended (a restart, the ticket's hour): take a new one
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if m.Event != "" {
				if m.ID != "" {
					s.last = m.ID
				}
				return m, nil
			}
			m = streamMessage{}
		case strings.HasPrefix(line, "id: "):
			m.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			m.Event = line[7:]
		case strings.HasPrefix(line, "data: "):
			m.Data = []byte(line[6:])
		}
	}
}

func (s *liveStream) close() {
	if s.body != nil {
		s.body.Close()
	}
	s.body, s.reader = nil, nil
}

// jobEvents is a job.events message.
type jobEvents struct {
	JobID  string            `json:"job_id"`
	Events []apiclient.Event `json:"events"`
}

// terminal reports whether a job or deployment status is final.
func terminal(status string) bool {
	switch status {
	case "succeeded", "failed", "cancelled", "superseded":
		return true
	}
	return false
}

// follower follows one job or deployment to its end on the live stream:
// refresh reads its state again (when a message says it may have
// changed), and the job's progress events are printed as they come.
type follower struct {
	c       *conn
	log     io.Writer
	printed int64 // the last event's seq printed
	// jobID is the job whose events are printed; "" while unknown.
	jobID string
	// appID, when set: a job of this application may be the one.
	appID string
}

// printEvents prints the events not printed yet.
func (f *follower) printEvents(evs []apiclient.Event) {
	for _, e := range evs {
		if e.Seq <= f.printed {
			continue
		}
		f.printed = e.Seq
		fmt.Fprintf(f.log, "%s  %-5s %s\n", e.At.Local().Format("15:04:05"), e.Level, e.Message)
		if lines := logLines(e.Data); len(lines) > 0 {
			for _, l := range lines {
				fmt.Fprintf(f.log, "          | %s\n", l)
			}
		}
	}
}

// logLines are the log lines an event carries (a failed release's tail).
func logLines(data any) []string {
	m, ok := data.(map[string]any)
	if !ok {
		return nil
	}
	raw, _ := m["lines"].([]any)
	var out []string
	for _, l := range raw {
		if s, ok := l.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// run waits until refresh says the thing is done. refresh is called once
// the stream is open (so no change is missed between) and after every
// message that concerns it.
func (f *follower) run(ctx context.Context, refresh func(context.Context) (bool, error)) error {
	s := &liveStream{c: f.c}
	defer s.close()
	if err := s.open(ctx); err != nil {
		return err
	}
	done, err := refresh(ctx)
	if err != nil || done {
		return err
	}
	for {
		m, err := s.next(ctx)
		if err != nil {
			return err
		}
		switch m.Event {
		case "job.events":
			var je jobEvents
			if json.Unmarshal(m.Data, &je) == nil && je.JobID == f.jobID && f.jobID != "" {
				f.printEvents(je.Events)
			}
			continue
		case "job":
			var j struct {
				ID    string `json:"id"`
				AppID string `json:"app_id"`
			}
			if json.Unmarshal(m.Data, &j) != nil || (j.ID != f.jobID && (f.appID == "" || j.AppID != f.appID)) {
				continue
			}
		case "reset":
		default:
			continue
		}
		if done, err := refresh(ctx); err != nil || done {
			return err
		}
	}
}

// withTimeout bounds ctx by timeout (0: none) and says, when it passes or
// the user interrupts, how to follow again.
func withTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

// stopped turns the end of a follow by --timeout or Ctrl-C into its exit.
func stopped(ctx, parent context.Context, err error, again string) error {
	switch {
	case parent.Err() != nil:
		return exitf(130, "interrupted; the job goes on: follow it again with `%s`", again)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return exitf(exitTimeout, "--timeout passed; the job goes on: follow it again with `%s`", again)
	}
	return err
}

// waitJob follows the job jobID live to its end, printing its progress
// events to log, and returns the job as it ended.
func waitJob(ctx context.Context, c *conn, jobID string, log io.Writer) (*apiclient.JobDetail, error) {
	f := &follower{c: c, log: log, jobID: jobID}
	var last *apiclient.JobDetail
	err := f.run(ctx, func(ctx context.Context) (bool, error) {
		g, err := answered(c.api.GetJobWithResponse(ctx, jobID, &apiclient.GetJobParams{})).or("reading job " + jobID)
		if err != nil {
			return false, err
		}
		last = g.JSON200
		if last.Events != nil {
			f.printEvents(*last.Events)
		}
		return terminal(string(last.Status)), nil
	})
	return last, err
}

// followJob follows the job jobID to its end within timeout and reports
// it: its document with --json, and exit 0 only when it succeeded.
func followJob(parent context.Context, c *conn, flags ClientFlags, jobID string, timeout time.Duration) error {
	ctx, cancel := withTimeout(parent, timeout)
	defer cancel()
	j, err := waitJob(ctx, c, jobID, os.Stderr)
	if err != nil {
		return stopped(ctx, parent, err, "capstan jobs wait "+jobID)
	}
	return jobFinished(flags.JSON, j)
}

// jobFinished is finished for a job: a failure names the step that failed
// (its last error event) besides the job's error.
func jobFinished(asJSON bool, j *apiclient.JobDetail) error {
	why := j.Error
	if why == nil {
		why = j.ErrorClass
	}
	if j.Status != "succeeded" && j.Events != nil {
		evs := *j.Events
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Level == "error" {
				if why == nil || !strings.Contains(*why, evs[i].Message) {
					step := "at " + evs[i].Message
					if why != nil {
						step = *why + " (" + step + ")"
					}
					why = &step
				}
				break
			}
		}
	}
	return finished(asJSON, j, "job "+j.Id+" ("+j.Type+")", string(j.Status), why)
}

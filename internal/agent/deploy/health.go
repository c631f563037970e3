package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// answer is the outcome of one health probe.
type answer struct {
	Status int       `json:"status,omitempty"`
	Body   string    `json:"body,omitempty"`
	Error  string    `json:"error,omitempty"`
	At     time.Time `json:"at"`
}

// healthy: a 2xx or 3xx answer (redirects are not followed).
func (a answer) healthy() bool { return a.Error == "" && a.Status >= 200 && a.Status < 400 }

func (a answer) String() string {
	if a.Error != "" {
		return a.Error
	}
	s := fmt.Sprintf("HTTP %d", a.Status)
	if t := http.StatusText(a.Status); t != "" {
		s += " " + t
	}
	if a.Body != "" {
		s += fmt.Sprintf(": %q", a.Body)
	}
	return s
}

// maxBodyExcerpt bounds the body of an answer kept for the job's error.
const maxBodyExcerpt = 200

// probeTimeout bounds one health probe.
const probeTimeout = 2 * time.Second

// healthClient probes without a proxy, connection reuse or redirects.
func healthClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:             nil,
			DialContext:       (&net.Dialer{Timeout: probeTimeout}).DialContext,
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       probeTimeout,
	}
}

func probe(ctx context.Context, hc *http.Client, target string) answer {
	a := answer{}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err == nil {
		req.Header.Set("User-Agent", "capstan-agent health check")
		var res *http.Response
		if res, err = hc.Do(req); err == nil {
			b, _ := io.ReadAll(io.LimitReader(res.Body, 4*maxBodyExcerpt))
			res.Body.Close()
			a.Status, a.Body = res.StatusCode, excerpt(string(b))
		}
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		a.Error = err.Error()
	}
	a.At = time.Now().UTC()
	return a
}

// excerpt is the start of a body on one line.
func excerpt(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
	if len(s) > maxBodyExcerpt {
		cut := maxBodyExcerpt
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// healthError is a failed health check: the reason and the last answer.
type healthError struct {
	reason string
	last   answer
}

func (e *healthError) Error() string {
	msg := "health check failed: " + e.reason
	if !e.last.At.IsZero() {
		msg += "; last answer: " + e.last.String()
	}
	return msg
}

// waitHealthy probes http://<upstream><path> until it answers 2xx or 3xx,
// the timeout passes, the container exits or ctx ends.
func (d *Deployer) waitHealthy(ctx context.Context, cli *client.Client, s started, path string, timeout time.Duration, events agent.EventSink) (answer, error) {
	return d.waitAnswer(ctx, "http://"+s.upstream()+path, path, timeout, events, func(ctx context.Context) string {
		if why := exited(ctx, cli, s.ID); why != "" {
			return "the container " + why
		}
		return ""
	})
}

// waitAnswer probes target until it answers 2xx or 3xx, the timeout
// passes, stopped says what it probes stopped running, or ctx ends.
func (d *Deployer) waitAnswer(ctx context.Context, target, path string, timeout time.Duration, events agent.EventSink, stopped func(context.Context) string) (answer, error) {
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("waiting up to %s for a 2xx or 3xx answer from %s", timeout, target), nil)
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := healthClient()
	var last answer
	tick := time.NewTicker(d.opts.HealthInterval)
	defer tick.Stop()
	for {
		a := probe(hctx, hc, target)
		if hctx.Err() == nil || a.Error == "" || last.At.IsZero() {
			// (a probe cut short by the end of the wait does not hide the
			// answer before it)
			last = a
		}
		if last.healthy() {
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("healthy after %s: %s", time.Since(start).Round(time.Millisecond), last), last)
			return last, nil
		}
		if why := stopped(hctx); why != "" {
			return last, &healthError{reason: why, last: last}
		}
		select {
		case <-tick.C:
		case <-hctx.Done():
			if ctx.Err() != nil {
				return last, &healthError{reason: fmt.Sprintf("the job ended before an answer (%v)", context.Cause(ctx)), last: last}
			}
			return last, &healthError{reason: fmt.Sprintf("no 2xx or 3xx answer from %s within %s", path, timeout), last: last}
		}
	}
}

// exited says how the container stopped running, or "" while it runs and
// has not restarted.
func exited(ctx context.Context, cli *client.Client, id string) string {
	res, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		if ctx.Err() != nil {
			return ""
		}
		return fmt.Sprintf("could not be inspected: %v", err)
	}
	c := res.Container
	st := c.State
	switch {
	case st == nil:
		return ""
	case st.OOMKilled:
		return "was killed for exceeding its memory limit"
	case !st.Running || st.Restarting:
		return fmt.Sprintf("exited with status %d", st.ExitCode)
	case c.RestartCount > 0 && st.ExitCode != 0:
		return fmt.Sprintf("exited with status %d and was restarted (%d times)", st.ExitCode, c.RestartCount)
	case c.RestartCount > 0:
		return fmt.Sprintf("exited and was restarted (%d times)", c.RestartCount)
	}
	return ""
}

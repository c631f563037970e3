package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Time limits of calls to the control plane.
const (
	// RequestTimeout bounds every call except the claim long poll.
	RequestTimeout = 30 * time.Second
	// ClaimSlack is added to the claim's wait_seconds for its timeout.
	ClaimSlack = 15 * time.Second

	maxReplyBytes   = 1 << 20
	maxProblemBytes = 64 << 10
)

// ErrRevoked matches (errors.Is) the error of any call whose reply says the
// agent's credential is revoked or unknown. The agent must stop and exit
// with agentproto.ExitRevoked.
var ErrRevoked = errors.New("agent credential revoked")

// RevokedError is the error of a call answered 401 with problem type
// agentproto.ProblemAgentRevoked or agentproto.ProblemInvalidAgentToken.
type RevokedError struct {
	Problem agentproto.Problem
}

func (e *RevokedError) Error() string {
	msg := "the control plane rejected this agent's credential"
	if e.Problem.Type == agentproto.ProblemAgentRevoked {
		msg = "this server was revoked or deleted on the control plane"
	} else if e.Problem.Type == agentproto.ProblemInvalidAgentToken {
		msg = "the control plane does not know this agent's token"
	}
	if e.Problem.Detail != "" {
		msg += ": " + e.Problem.Detail
	}
	return msg
}

// Is makes errors.Is(err, ErrRevoked) true.
func (e *RevokedError) Is(target error) bool { return target == ErrRevoked }

// ExitCode is the process exit status for this error (kong.ExitCoder).
func (e *RevokedError) ExitCode() int { return agentproto.ExitRevoked }

// APIError is a non-2xx reply other than a revocation.
type APIError struct {
	Method string
	Path   string
	Status int
	// Problem is the RFC 9457 body, zero if the body was not one.
	Problem agentproto.Problem
	// RetryAfter is the reply's Retry-After, zero if absent.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.Problem.Detail != "" {
		s += ": " + e.Problem.Detail
	} else if e.Problem.Title != "" {
		s += ": " + e.Problem.Title
	}
	return s
}

// Temporary reports whether the same call may succeed later: 408, 425, 429
// and 5xx.
func (e *APIError) Temporary() bool {
	switch e.Status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return e.Status >= 500
}

// StatusOf returns the HTTP status of an *APIError in err's chain, else 0.
func StatusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// retryAfter parses a Retry-After header (RFC 9110 10.2.3): seconds, or an
// HTTP date. Zero if absent, malformed or past.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(MaxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}

// NewHTTPClient returns the one HTTP client an agent uses: keep-alives, few
// idle connections, no overall timeout (each call sets its own deadline, the
// claim long poll a longer one).
func NewHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

// Client calls /agent/v1 on the control plane.
type Client struct {
	base      string
	token     string
	userAgent string
	hc        *http.Client
	onRevoked func(*RevokedError)
}

// NewClient returns a client for the control plane at apiURL (see
// ParseAPIURL) that authenticates with token (empty for Enroll only).
// onRevoked, if not nil, is called for every reply that revokes the agent.
// A nil hc means NewHTTPClient().
func NewClient(apiURL, token, version string, hc *http.Client, onRevoked func(*RevokedError)) (*Client, error) {
	base, err := ParseAPIURL(apiURL)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = NewHTTPClient()
	}
	if version == "" {
		version = "dev"
	}
	return &Client{
		base:      base + "/agent/" + agentproto.Version,
		token:     token,
		userAgent: "capstan-agent/" + version,
		hc:        hc,
		onRevoked: onRevoked,
	}, nil
}

// Enroll redeems a one-time enrollment token.
func (c *Client) Enroll(ctx context.Context, req agentproto.EnrollRequest) (agentproto.EnrollResponse, error) {
	var resp agentproto.EnrollResponse
	_, err := c.do(ctx, RequestTimeout, http.MethodPost, "/enroll", false, req, &resp)
	return resp, err
}

// Heartbeat reports liveness and running jobs and fetches the configuration.
func (c *Client) Heartbeat(ctx context.Context, req agentproto.HeartbeatRequest) (agentproto.HeartbeatResponse, error) {
	var resp agentproto.HeartbeatResponse
	_, err := c.do(ctx, RequestTimeout, http.MethodPost, "/heartbeat", true, req, &resp)
	return resp, err
}

// Claim long-polls for a job for up to waitSeconds. It returns nil, nil when
// no job came within the wait.
func (c *Client) Claim(ctx context.Context, waitSeconds int) (*agentproto.Job, error) {
	var resp agentproto.ClaimResponse
	timeout := time.Duration(waitSeconds)*time.Second + ClaimSlack
	status, err := c.do(ctx, timeout, http.MethodPost, "/jobs/claim", true, agentproto.ClaimRequest{WaitSeconds: waitSeconds}, &resp)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	if resp.Job.ID == "" {
		return nil, errors.New("claim reply has no job id")
	}
	return &resp.Job, nil
}

// Secrets fetches the secrets of a job.
func (c *Client) Secrets(ctx context.Context, jobID string) (map[string]string, error) {
	var resp agentproto.SecretsResponse
	_, err := c.do(ctx, RequestTimeout, http.MethodGet, "/jobs/"+url.PathEscape(jobID)+"/secrets", true, nil, &resp)
	return resp.Secrets, err
}

// PostEvents appends progress events to a job.
func (c *Client) PostEvents(ctx context.Context, jobID string, events []agentproto.Event) error {
	_, err := c.do(ctx, RequestTimeout, http.MethodPost, "/jobs/"+url.PathEscape(jobID)+"/events", true, agentproto.EventsRequest{Events: events}, nil)
	return err
}

// Complete reports a job's outcome.
func (c *Client) Complete(ctx context.Context, jobID string, req agentproto.CompleteRequest) error {
	_, err := c.do(ctx, RequestTimeout, http.MethodPost, "/jobs/"+url.PathEscape(jobID)+"/complete", true, req, nil)
	return err
}

// PostMetrics delivers metric samples, oldest first; each is stored at its
// own time.
func (c *Client) PostMetrics(ctx context.Context, samples []agentproto.MetricSample) error {
	_, err := c.do(ctx, RequestTimeout, http.MethodPost, "/metrics", true, agentproto.MetricsRequest{Samples: samples}, nil)
	return err
}

// PostHealth reports the results of probing the applications' health.
// With rep.WantTargets it returns the applications to probe from then
// on; nil when the control plane did not send them (one older than
// HealthTargets answers 204).
func (c *Client) PostHealth(ctx context.Context, rep agentproto.HealthReport) (*agentproto.HealthTargets, error) {
	var out agentproto.HealthTargets
	code, err := c.do(ctx, RequestTimeout, http.MethodPost, "/health", true, rep, &out)
	if err != nil || code != http.StatusOK || !rep.WantTargets {
		return nil, err
	}
	return &out, nil
}

// PostInventory reports the host's services, containers and listening
// ports.
func (c *Client) PostInventory(ctx context.Context, inv agentproto.InventoryRequest) error {
	_, err := c.do(ctx, RequestTimeout, http.MethodPost, "/inventory", true, inv, nil)
	return err
}

// PostRequests reports per-host, per-minute request aggregates; a minute
// sent again replaces the one sent before.
func (c *Client) PostRequests(ctx context.Context, rep agentproto.RequestsReport) (agentproto.RequestsResult, error) {
	// A control plane older than RequestsResult answers 204: nothing
	// skipped.
	var res agentproto.RequestsResult
	_, err := c.do(ctx, RequestTimeout, http.MethodPost, "/requests", true, rep, &res)
	return res, err
}

// Proxy fetches the server's current desired proxy state with its
// revision. A control plane from before revisions answers 404 (StatusOf).
func (c *Client) Proxy(ctx context.Context) (agentproto.ProxyConfig, error) {
	var resp agentproto.ProxyStateResponse
	_, err := c.do(ctx, RequestTimeout, http.MethodGet, "/proxy", true, nil, &resp)
	return resp.Proxy, err
}

// do sends one request and decodes a 2xx JSON reply into out (unless nil or
// 204). It returns the status and, for non-2xx replies, a *RevokedError or
// *APIError. The body is always read to the end (bounded) and closed so the
// connection can be reused.
func (c *Client) do(ctx context.Context, timeout time.Duration, method, path string, auth bool, in, out any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("encoding %s request: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", c.userAgent)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		lr := io.LimitReader(resp.Body, maxReplyBytes)
		if out != nil && resp.StatusCode != http.StatusNoContent {
			if err := json.NewDecoder(lr).Decode(out); err != nil {
				return resp.StatusCode, fmt.Errorf("%s %s: decoding reply: %w", method, path, err)
			}
		}
		_, _ = io.Copy(io.Discard, lr)
		return resp.StatusCode, nil
	}
	return resp.StatusCode, c.replyError(method, path, resp)
}

// replyError is the error of a non-2xx reply: a *RevokedError (after
// onRevoked) or an *APIError.
func (c *Client) replyError(method, path string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemBytes))
	var p agentproto.Problem
	if json.Unmarshal(b, &p) != nil {
		p = agentproto.Problem{}
	}
	if resp.StatusCode == http.StatusUnauthorized &&
		(p.Type == agentproto.ProblemAgentRevoked || p.Type == agentproto.ProblemInvalidAgentToken) {
		rerr := &RevokedError{Problem: p}
		if c.onRevoked != nil {
			c.onRevoked(rerr)
		}
		return rerr
	}
	ae := &APIError{Method: method, Path: path, Status: resp.StatusCode, Problem: p}
	ae.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	return ae
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
)

// httpError is an unexpected HTTP status.
type httpError struct {
	Status int
	Body   string
}

func (e *httpError) Error() string {
	b := e.Body
	if len(b) > 300 {
		b = b[:300] + "…"
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, strings.TrimSpace(b))
}

// problemType returns the problem type of an error response, if any.
func (e *httpError) problemType() string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal([]byte(e.Body), &p)
	return p.Type
}

// do sends a JSON request and reads the whole response. want lists the
// statuses that are success; any other is an *httpError. out, when not nil,
// receives the decoded body of a 200 or 201.
func do(ctx context.Context, hc *http.Client, method, url, token string, in, out any, want ...int) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("User-Agent", "capstan-fleetsim")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	ok := false
	for _, w := range want {
		ok = ok || resp.StatusCode == w
	}
	if !ok {
		return resp.StatusCode, &httpError{Status: resp.StatusCode, Body: string(b)}
	}
	if out != nil && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusAccepted) {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decoding the reply: %w", err)
		}
	}
	return resp.StatusCode, nil
}

// refused reports whether a call failed because nothing listened at the
// address: the request never reached a control plane, so sending it to
// another is safe, whatever its method.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// admin is the simulator's administrator session: a fixed bearer token, or
// one obtained by signing in and kept fresh with the refresh cookie. With
// several control planes it talks to one of them and moves to the next when
// that one refuses connections, as a browser behind a load balancer is
// moved; the session is the same on every control plane of the database.
type admin struct {
	urls []string
	cur  atomic.Int32 // the control plane the administrator talks to
	hc   *http.Client
	rec  *recorder

	mu    sync.RWMutex // guards token
	token string

	canRefresh bool
}

func newAdmin(urls []string, hc *http.Client, rec *recorder, token string) *admin {
	return &admin{urls: urls, hc: hc, rec: rec, token: token}
}

// send sends a request (see do) to the control plane the administrator
// talks to, or, with via ≥ 0, to control plane via first; on a refused
// connection it tries the next ones in --url order and keeps talking to
// the one that answered. It returns the index of the control plane that
// answered, or of the last one tried.
func (a *admin) send(ctx context.Context, via int, method, path, token string, in, out any, want ...int) (cp, status int, err error) {
	n := len(a.urls)
	first := via
	if first < 0 {
		first = int(a.cur.Load())
	}
	for i := range n {
		cp = (first + i) % n
		status, err = do(ctx, a.hc, method, a.urls[cp]+path, token, in, out, want...)
		if !refused(err) {
			if i > 0 {
				a.cur.Store(int32(cp))
			}
			return cp, status, err
		}
	}
	return cp, status, err
}

func (a *admin) bearer() string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.token
}

// signIn signs in with a password and a TOTP code computed from the
// secret. Each TOTP step is accepted once per user; when the current one
// was used already, the next one (which the control plane accepts too) is
// tried.
func (a *admin) signIn(ctx context.Context, email, password, secret string) error {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return err
	}
	hc := *a.hc
	hc.Jar = jar
	a.hc = &hc
	var lastErr error
	for _, ahead := range []time.Duration{0, 30 * time.Second} {
		var ch struct {
			ChallengeID string `json:"challenge_id"`
		}
		start := time.Now()
		cp, _, err := a.send(ctx, -1, http.MethodPost, "/api/v1/auth/login", "",
			map[string]string{"email": email, "password": password}, &ch, http.StatusOK)
		a.rec.record(cp, callAuth, time.Since(start), err)
		if err != nil {
			return fmt.Errorf("login: %w", err)
		}
		code, err := totp.GenerateCodeCustom(secret, time.Now().Add(ahead),
			totp.ValidateOpts{Period: 30, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
		if err != nil {
			return fmt.Errorf("TOTP code: %w", err)
		}
		var tok struct {
			AccessToken string `json:"access_token"`
		}
		start = time.Now()
		cp, _, err = a.send(ctx, -1, http.MethodPost, "/api/v1/auth/2fa/verify", "",
			map[string]string{"challenge_id": ch.ChallengeID, "code": code}, &tok, http.StatusOK)
		if err == nil {
			a.rec.record(cp, callAuth, time.Since(start), nil)
			a.mu.Lock()
			a.token = tok.AccessToken
			a.mu.Unlock()
			a.canRefresh = true
			return nil
		}
		lastErr = err
	}
	return fmt.Errorf("2fa/verify: %w", lastErr)
}

// check confirms that the token is an administrator's.
func (a *admin) check(ctx context.Context) error {
	var me struct {
		User struct {
			Email string `json:"email"`
			Admin bool   `json:"admin"`
		} `json:"user"`
	}
	if _, _, err := a.send(ctx, -1, http.MethodGet, "/api/v1/auth/me", a.bearer(), nil, &me, http.StatusOK); err != nil {
		return fmt.Errorf("checking the access token: %w", err)
	}
	if !me.User.Admin {
		return fmt.Errorf("%s is not an administrator", me.User.Email)
	}
	return nil
}

// keepFresh refreshes the access token (valid 15 minutes) every interval
// until ctx ends. The refresh cookie rotates on each use.
func (a *admin) keepFresh(ctx context.Context, every time.Duration) {
	if !a.canRefresh {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
			var tok struct {
				AccessToken string `json:"access_token"`
			}
			start := time.Now()
			cp, _, err := a.send(ctx, -1, http.MethodPost, "/api/v1/auth/refresh", "", nil, &tok, http.StatusOK)
			if ctx.Err() != nil {
				return
			}
			a.rec.record(cp, callAuth, time.Since(start), err)
			if err == nil {
				a.mu.Lock()
				a.token = tok.AccessToken
				a.mu.Unlock()
				break
			}
			sleep(ctx, time.Duration(attempt+1)*2*time.Second)
		}
	}
}

// enrollment is the part of POST /api/v1/servers/enrollments' reply the
// simulator uses.
type enrollment struct {
	Server struct {
		ID string `json:"id"`
	} `json:"server"`
	Token string `json:"token"`
}

// createEnrollment creates a pending server.
func (a *admin) createEnrollment(ctx context.Context, name string) (enrollment, error) {
	var e enrollment
	start := time.Now()
	cp, _, err := a.send(ctx, -1, http.MethodPost, "/api/v1/servers/enrollments", a.bearer(),
		map[string]any{"name": name, "tags": []string{"fleetsim"}}, &e, http.StatusCreated)
	if ctx.Err() == nil {
		a.rec.record(cp, callEnrollment, time.Since(start), err)
	}
	if err == nil && (e.Server.ID == "" || e.Token == "") {
		err = fmt.Errorf("enrollment reply lacks the server id or token")
	}
	return e, err
}

// queuePing queues agent.ping on a server through control plane via (or
// the next that accepts connections) and returns the job id and when the
// response arrived.
func (a *admin) queuePing(ctx context.Context, serverID string, via int) (string, time.Time, error) {
	var out struct {
		JobID string `json:"job_id"`
	}
	start := time.Now()
	cp, _, err := a.send(ctx, via, http.MethodPost, "/api/v1/servers/"+serverID+"/actions", a.bearer(),
		map[string]any{"type": "agent.ping", "payload": map[string]string{"message": "fleetsim"}}, &out, http.StatusAccepted)
	at := time.Now()
	if ctx.Err() != nil {
		return "", at, ctx.Err()
	}
	if err == nil && out.JobID == "" {
		err = fmt.Errorf("action reply lacks job_id")
	}
	a.rec.record(cp, callActions, at.Sub(start), err)
	return out.JobID, at, err
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// evaluate runs one alert evaluation cycle and records how long it took.
func (a *admin) evaluate(ctx context.Context) error {
	start := time.Now()
	cp, _, err := a.send(ctx, -1, http.MethodPost, "/api/v1/monitoring/evaluate", a.bearer(), nil, nil, http.StatusOK)
	if ctx.Err() == nil {
		a.rec.record(cp, callEvaluate, time.Since(start), err)
	}
	return err
}

// evaluateLoop runs an alert evaluation cycle every --evaluate-every until
// ctx ends, one at a time.
func (s *sim) evaluateLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.EvalEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ectx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		s.admin.evaluate(ectx) //nolint:errcheck // recorded
		cancel()
	}
}

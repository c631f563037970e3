package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/atomicfile"
	"github.com/capstan-dev/capstan/internal/apiclient"
)

// Exit codes of the client commands.
const (
	exitFailed   = 1 // the job or the request failed
	exitUsage    = 2 // the command line is wrong
	exitAuth     = 3 // not signed in, or the credential may not do it
	exitNotFound = 4 // what the command names does not exist
	exitTimeout  = 5 // --timeout passed before the job ended
)

// exitError ends the command with its code; its message goes to stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// ClientFlags say which control plane a client command talks to, and as
// whom: CAPSTAN_URL and CAPSTAN_TOKEN (an API token) for pipelines, or a
// context saved by `capstan login`.
type ClientFlags struct {
	URL     string `name:"url" env:"CAPSTAN_URL" help:"The control plane's URL (default: the current context's)."`
	Token   string `name:"token" env:"CAPSTAN_TOKEN" help:"An API token (cpt_…); without it, the session of the context's login."`
	Context string `name:"context" env:"CAPSTAN_CONTEXT" help:"The saved login to use (default: the current one)."`
	JSON    bool   `name:"json" help:"Print one JSON document on stdout; messages go to stderr."`
}

// clientConfig is what `capstan login` keeps: one context per control
// plane, in the user's config dir, mode 0600.
type clientConfig struct {
	Current  string                    `json:"current"`
	Contexts map[string]*clientContext `json:"contexts"`
}

type clientContext struct {
	URL   string `json:"url"`
	Email string `json:"email"`
	// The refresh cookie of the login's session: it rotates at every use.
	CookieName  string `json:"cookie_name"`
	CookieValue string `json:"cookie_value"`
}

func configPath() (string, error) {
	if p := os.Getenv("CAPSTAN_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "capstan", "config.json"), nil
}

func loadConfig() (*clientConfig, string, error) {
	p, err := configPath()
	if err != nil {
		return nil, "", err
	}
	c := &clientConfig{Contexts: map[string]*clientContext{}}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return c, p, nil
	}
	if err != nil {
		return nil, "", err
	}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, "", fmt.Errorf("%s: %w", p, err)
	}
	if c.Contexts == nil {
		c.Contexts = map[string]*clientContext{}
	}
	return c, p, nil
}

// save writes the config atomically, readable by its owner only.
func (c *clientConfig) save(p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(p, b, 0o600)
}

// clientName is the client's name in its requests' User-Agent, which
// the audit log keeps: capstan-cli, or capstan-mcp for the MCP server.
var clientName = "capstan-cli"

// conn is an authenticated connection to a control plane.
type conn struct {
	base   string
	http   *http.Client
	api    *apiclient.ClientWithResponses
	bearer string
	flags  ClientFlags
}

// connect resolves the flags to a control plane and a credential: the
// API token if one is given, else a fresh access token from the
// context's refresh cookie (saved again, rotated).
func connect(ctx context.Context, f ClientFlags) (*conn, error) {
	c := &conn{flags: f, http: &http.Client{Timeout: 0}}
	var cctx *clientContext
	var cfg *clientConfig
	var cfgPath string
	if f.Token == "" || f.URL == "" {
		var err error
		if cfg, cfgPath, err = loadConfig(); err != nil {
			return nil, err
		}
		name := f.Context
		if name == "" {
			name = cfg.Current
		}
		cctx = cfg.Contexts[name]
		if cctx == nil && f.Token == "" {
			return nil, exitf(exitAuth, "not signed in: run `capstan login --url URL`, or set CAPSTAN_URL and CAPSTAN_TOKEN")
		}
	}
	c.base = strings.TrimRight(f.URL, "/")
	if c.base == "" && cctx != nil {
		c.base = cctx.URL
	}
	if c.base == "" {
		return nil, exitf(exitUsage, "no control plane: give --url or CAPSTAN_URL")
	}
	if _, err := url.ParseRequestURI(c.base); err != nil {
		return nil, exitf(exitUsage, "--url %q: %v", c.base, err)
	}
	api, err := apiclient.NewClientWithResponses(c.base, apiclient.WithHTTPClient(c.http),
		apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			if c.bearer != "" {
				r.Header.Set("Authorization", "Bearer "+c.bearer)
			}
			r.Header.Set("User-Agent", clientName+"/"+version)
			return nil
		}))
	if err != nil {
		return nil, err
	}
	c.api = api
	if f.Token != "" {
		c.bearer = f.Token
		return c, nil
	}
	// The session of the login: one refresh, and the rotated cookie is
	// kept for the next command.
	resp, err := api.RefreshWithResponse(ctx, func(_ context.Context, r *http.Request) error {
		r.AddCookie(&http.Cookie{Name: cctx.CookieName, Value: cctx.CookieValue})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, exitf(exitAuth, "the login of %s on %s has ended (%s): run `capstan login` again", cctx.Email, c.base, problemText(resp.HTTPResponse, resp.Body))
	}
	for _, ck := range resp.HTTPResponse.Cookies() {
		if ck.Name == cctx.CookieName && ck.Value != "" {
			cctx.CookieValue = ck.Value
		}
	}
	if err := cfg.save(cfgPath); err != nil {
		return nil, err
	}
	c.bearer = resp.JSON200.AccessToken
	return c, nil
}

// problemText is an error answer as one line: the problem's detail, or
// the status.
func problemText(r *http.Response, body []byte) string {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
		Errors []struct {
			Location string `json:"location"`
			Message  string `json:"message"`
		} `json:"errors"`
	}
	status := "no answer"
	if r != nil {
		status = r.Status
	}
	if json.Unmarshal(body, &p) != nil || (p.Detail == "" && p.Title == "") {
		return status
	}
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	for _, e := range p.Errors {
		msg += "; " + e.Location + ": " + e.Message
	}
	return status + ": " + msg
}

// check turns an answer that is not a success into an exit error with
// the code its status calls for.
func check(r *http.Response, body []byte, what string) error {
	if r == nil {
		return exitf(exitFailed, "%s: no answer", what)
	}
	if r.StatusCode/100 == 2 {
		return nil
	}
	code := exitFailed
	switch r.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		code = exitAuth
	case http.StatusNotFound:
		code = exitNotFound
	case http.StatusUnprocessableEntity, http.StatusBadRequest:
		code = exitUsage
	}
	return exitf(code, "%s: %s", what, problemText(r, body))
}

// printJSON writes v as the command's one JSON document.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// show prints a command's answer: doc as its one JSON document with
// --json, else a table of header and rows for a person.
func show(f ClientFlags, doc any, header []string, rows [][]string) error {
	if f.JSON {
		return printJSON(os.Stdout, doc)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// ago is a time as a person reads it in a table.
func ago(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Format("2006-01-02")
}

// apiAnswer is what every generated response has.
type apiAnswer interface{ StatusCode() int }

// called is an API call's result on its way to being checked.
type called[R apiAnswer] struct {
	r   R
	err error
}

// answered takes an API call's two results, to check them with or.
func answered[R apiAnswer](r R, err error) called[R] { return called[R]{r, err} }

// or is the call's response, or the exit error of its transport failure
// or of a status that is not a success, saying what was being done.
func (a called[R]) or(what string) (R, error) {
	if a.err != nil {
		return a.r, a.err
	}
	body, resp := responseOf(a.r)
	return a.r, check(resp, body, what)
}

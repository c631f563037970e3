package e2e

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// smtpOptions runs a control plane that mails through s.
func smtpOptions(s *testlab.SMTPServer, extra ...string) Options {
	return Options{
		Env: []string{"SSL_CERT_FILE=" + s.CAFile, "CAPSTAN_SMTP_PASSWORD=" + s.Password, "CAPSTAN_SMTP_USER=" + s.User},
		Args: append([]string{"--smtp-host", s.Host, "--smtp-port", strconv.Itoa(s.Port), "--smtp-security", "starttls",
			"--smtp-from", "capstan@example.com", "--notify-retry-base=200ms"}, extra...),
	}
}

// TestAlertMailsGoOutOverSTARTTLS: an alert opening is mailed, through a
// real SMTP server with STARTTLS and authentication, to every user whose
// preferences ask for alerts, in plain text and HTML with a link to the
// alert; a user who turned alert mails off gets none. capstan notify
// test-email sends with the same settings.
func TestAlertMailsGoOutOverSTARTTLS(t *testing.T) {
	s := testlab.StartSMTPServer(t)
	opts := smtpOptions(s)
	opts.PublicURL = "https://capstan.example.com"
	f := newFleet(t, opts)
	memberUser := createUser(t, f.ControlPlane, "member@example.com", testPassword, false)
	member := signInUser(t, f.ControlPlane, memberUser).AccessToken
	quietUser := createUser(t, f.ControlPlane, "quiet@example.com", testPassword, false)
	quiet := signInUser(t, f.ControlPlane, quietUser).AccessToken

	r := f.Get(t, "/api/v1/notifications/settings", member)
	var st struct {
		Success bool `json:"email_deploy_success"`
		Failure bool `json:"email_deploy_failure"`
		Alerts  bool `json:"email_alerts"`
	}
	expectJSON(t, r, http.StatusOK, &st)
	if st.Success || !st.Failure || !st.Alerts {
		t.Fatalf("default settings: %+v", st)
	}
	r = f.Do(t, Req{Method: http.MethodPut, Path: "/api/v1/notifications/settings", Token: quiet,
		JSON: map[string]any{"email_deploy_success": false, "email_deploy_failure": true, "email_alerts": false}})
	expectStatus(t, r, http.StatusOK)

	e := f.createEnrollment(t, "mail-1")
	fd := feeder{f: f, token: f.enrollHTTP(t, e.Token).AgentToken}
	f.createRule(t, map[string]any{"kind": "cpu_high", "threshold": 80, "duration": 0, "scope": "server", "scope_id": e.Server.ID})
	fd.report(t, 99, 10, 0)
	ev := f.evaluate(t)
	if len(ev.Opened) != 1 {
		t.Fatalf("opened: %+v", ev.Opened)
	}
	alertID := ev.Opened[0].ID
	testlab.Eventually(t, 60*time.Second, "two alert mails", func() bool { return len(s.Mails()) >= 2 })
	to := map[string]string{}
	for _, m := range s.Mails() {
		if !m.TLS || m.User != s.User || m.From != "capstan@example.com" || len(m.To) != 1 {
			t.Fatalf("mail from %s to %v: tls %v, user %q", m.From, m.To, m.TLS, m.User)
		}
		to[m.To[0]] = string(m.Data)
	}
	if _, ok := to[quietUser.Email]; ok || len(to) != 2 || to[f.Admin.Email] == "" || to[memberUser.Email] == "" {
		t.Fatalf("mails went to %v; want the admin and the member, not the user who turned alerts off", keys(to))
	}
	body := to[memberUser.Email]
	for _, want := range []string{"Subject: [Capstan] [warning] cpu_high on mail-1", "text/plain", "text/html",
		"https://capstan.example.com/alerts/" + alertID} {
		if !strings.Contains(body, want) {
			t.Fatalf("the member's mail lacks %q:\n%s", want, body)
		}
	}
	// The same settings send a test e-mail from the command line.
	res := f.CLI(t, "", "notify", "test-email", "--to", "ops@example.com", "--smtp-host", s.Host, "--smtp-port", strconv.Itoa(s.Port),
		"--smtp-from", "capstan@example.com")
	if res.ExitCode != 0 {
		t.Fatalf("capstan notify test-email: exit %d: %s", res.ExitCode, res.Stderr)
	}
	testlab.Eventually(t, 10*time.Second, "the test e-mail", func() bool {
		for _, m := range s.Mails() {
			if len(m.To) == 1 && m.To[0] == "ops@example.com" && strings.Contains(string(m.Data), "Test e-mail") {
				return true
			}
		}
		return false
	})
	if strings.Contains(f.Logs(), s.Password) {
		t.Fatal("the control plane logged the SMTP password")
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestActionsDoNotWaitForAHungSMTPServer: with an SMTP server that accepts
// connections and never answers, an evaluation that opens an alert (whose
// mail is due) answers at once, and the inbox has the alert, while the
// mail's connection hangs.
func TestActionsDoNotWaitForAHungSMTPServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			defer c.Close() // held open, never answered, until the test ends
		}
	}()
	t.Cleanup(func() { ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	f := newFleet(t, Options{Args: []string{"--smtp-host", "127.0.0.1", "--smtp-port", strconv.Itoa(port), "--smtp-from", "capstan@example.com"}})
	e := f.createEnrollment(t, "hung-1")
	fd := feeder{f: f, token: f.enrollHTTP(t, e.Token).AgentToken}
	f.createRule(t, map[string]any{"kind": "cpu_high", "threshold": 80, "duration": 0, "scope": "server", "scope_id": e.Server.ID})
	fd.report(t, 99, 10, 0)
	if ev := f.evaluate(t); len(ev.Opened) != 1 {
		t.Fatalf("opened: %+v", ev.Opened)
	}
	testlab.Eventually(t, 30*time.Second, "the mail's connection to the hung server", func() bool { return accepted.Load() > 0 })
	// The mail hangs; the rest goes on.
	if got := inbox(t, f.ControlPlane, f.Token, ""); got.UnreadCount != 1 {
		t.Fatalf("inbox while the mail hangs: %+v", got)
	}
	fd.report(t, 10, 10, 0)
	if ev := f.evaluate(t); len(ev.Resolved) != 1 {
		t.Fatalf("resolved while the mail hangs: %+v", ev)
	}
}

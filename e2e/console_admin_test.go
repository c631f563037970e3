package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestConsoleAdmin drives the inbox, notification channels, e-mail, audit
// log, platform and keyboard shortcut screens in headless Chromium
// (web/e2e/admin.mjs) against a real control plane with a real agent, a
// webhook receiver and an SMTP server: an alert's inbox item arrives live
// and is marked read; a webhook channel is created and its test message
// delivered, signed with the secret the screen showed once; a test e-mail
// goes out; the audit log is filtered; the recovery kit downloads and
// opens with the password. Each is checked here through the API, the
// receiver, the SMTP server or the CLI.
func TestConsoleAdmin(t *testing.T) {
	t.Parallel()
	rc := testlab.StartReceiver(t, func(int, *http.Request) int { return http.StatusOK })
	mail := testlab.StartSMTPServer(t)
	// The control plane trusts both the receiver's and the SMTP server's CA.
	var bundle []byte
	for _, f := range []string{rc.CAFile, mail.CAFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, b...)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := smtpOptions(mail, "--notify-allow-destinations=127.0.0.0/8")
	opts.Env = append(slices.DeleteFunc(opts.Env, func(e string) bool { return strings.HasPrefix(e, "SSL_CERT_FILE=") }), "SSL_CERT_FILE="+caFile)
	f := newFleet(t, opts)

	// A real agent, with a sample reported: a rule on its memory opens an
	// alert when the browser is ready for it.
	en, config := f.enrollServer(t, "admin-agent")
	agent := startAgentWith(t, config, nil)
	testlab.Eventually(t, 90*time.Second, "the agent online with a sample", func() bool {
		r := f.Get(t, "/api/v1/servers/"+en.Server.ID, f.Token)
		return r.Status == http.StatusOK && strings.Contains(string(r.Body), `"status":"online"`) &&
			!strings.Contains(string(r.Body), `"latest_metrics":null`)
	})

	user := createUser(t, f.ControlPlane, "browser-admin@example.com", testPassword, true)
	member := createUser(t, f.ControlPlane, "member-ui@example.com", testPassword, false)
	hook := rc.URL + "/hooks/browser"
	var itemID, secret, channelID, version, kitFile string
	var agentVersions []string
	steps := runConsoleScriptAsUser(t, f, "admin.mjs", user, []string{"CAPSTAN_HOOK_URL=" + hook, "CAPSTAN_MEMBER_EMAIL=" + member.Email}, func(line string, fields []string) {
		switch fields[0] {
		case "inbox-ready":
			f.createRule(t, map[string]any{"kind": "memory_high", "threshold": 1, "duration": 0, "scope": "server", "scope_id": en.Server.ID})
			if ev := f.evaluate(t); len(ev.Opened) != 1 {
				t.Errorf("the alert did not open: %+v", ev)
			}
		case "inbox-read":
			itemID = fields[1]
			if fields[2] != "1" {
				t.Errorf("the header showed %s unread, want 1", fields[2])
			}
		case "channel-created":
			secret = fields[1]
		case "channel-tested":
			channelID = fields[1]
		case "platform":
			if len(fields) != 5 {
				t.Errorf("platform line %q", line)
				return
			}
			version, agentVersions, kitFile = fields[1], strings.Split(fields[2], ","), fields[4]
			if !strings.HasPrefix(fields[3], "capstan-recovery-kit-") || !strings.HasSuffix(fields[3], ".age") {
				t.Errorf("the kit's file name %q", fields[3])
			}
		case "users":
			// The member the screen made an administrator, disabled and
			// gave a new second factor: the API agrees, and the new secret
			// is not the old one.
			r := f.Get(t, "/api/v1/users", f.Token)
			var list struct {
				Users []struct {
					Email    string `json:"email"`
					Admin    bool   `json:"admin"`
					Disabled bool   `json:"disabled"`
				} `json:"users"`
			}
			expectJSON(t, r, http.StatusOK, &list)
			found := false
			for _, u := range list.Users {
				if u.Email == member.Email {
					found = true
					if !u.Admin || !u.Disabled {
						t.Errorf("the member after the users screen: %+v, want an administrator, disabled", u)
					}
				}
			}
			if !found || len(fields) != 2 || fields[1] == "" || fields[1] == member.TOTPSecret {
				t.Errorf("users line %q (member listed: %v)", line, found)
			}
		}
	}, func() string { return "agent log:\n" + agent.Logs() })
	want := "inbox-ready inbox-read channel-created channel-tested email-sent audit-filtered platform users shortcuts done"
	if strings.Join(steps, " ") != want {
		t.Fatalf("admin.mjs steps %v, want %s", steps, want)
	}

	// The channel the browser made, and its test message, signed with the
	// secret the screen showed.
	ch := f.channel(t, channelID)
	if ch.Kind != "webhook" || ch.Name != "browser-hook" || !slices.Contains(ch.Events, "alert.resolved") || ch.Secret != "" {
		t.Fatalf("the channel: %+v", ch)
	}
	var tests []testlab.Received
	for _, r := range rc.Requests() {
		if r.Path == "/hooks/browser" && strings.Contains(string(r.Body), `"channel.test"`) {
			tests = append(tests, r)
		}
	}
	if len(tests) != 1 || verifyStandardWebhook(t, tests[0], secret) != 1 {
		t.Fatalf("the receiver got %d test messages, want one signed with the secret shown", len(tests))
	}

	// The test e-mail.
	sent := false
	for _, m := range mail.Mails() {
		if len(m.To) == 1 && m.To[0] == "ops@example.com" && strings.Contains(string(m.Data), "Test e-mail") && m.TLS {
			sent = true
		}
	}
	if !sent {
		t.Fatal("the SMTP server got no test e-mail to ops@example.com")
	}

	// The audit log has the browser's doings.
	audit := f.Get(t, "/api/v1/audit-logs?limit=200&actor="+user.Email, f.Token)
	expectStatus(t, audit, http.StatusOK)
	for _, action := range []string{"notification.channel.created", "notification.email.tested", "platform.recovery_kit.refused",
		"platform.recovery_kit.downloaded"} {
		if !strings.Contains(string(audit.Body), `"`+action+`"`) {
			t.Errorf("the audit log has no %s by %s", action, user.Email)
		}
	}

	// The platform the screen showed, and the kit it downloaded.
	var platform struct {
		Version string `json:"version"`
		Agents  []struct {
			Version string `json:"version"`
			Servers int    `json:"servers"`
		} `json:"agents"`
	}
	f.Get(t, "/api/v1/platform", f.Token).JSON(t, &platform)
	var apiVersions []string
	for _, a := range platform.Agents {
		apiVersions = append(apiVersions, a.Version)
	}
	if version != platform.Version || !slices.Equal(agentVersions, apiVersions) || len(apiVersions) == 0 {
		t.Fatalf("the screen showed version %s and agents %v; the API says %s and %v", version, agentVersions, platform.Version, apiVersions)
	}
	res := f.CLI(t, user.Password+"\n", "recovery-kit", "open", "--file", kitFile, "--json")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, `"capstan-recovery-kit/1"`) {
		t.Fatalf("recovery-kit open of the downloaded kit: exit %d: %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	os.Remove(kitFile) //nolint:errcheck // it holds the test's key; best effort

	// The item the browser marked read is read in that user's inbox. The
	// browser used this TOTP step already.
	totpSteps.Lock()
	totpSteps.last[user.TOTPSecret] = time.Now().Unix() / 30
	totpSteps.Unlock()
	token := signInUser(t, f.ControlPlane, user).AccessToken
	page := inbox(t, f.ControlPlane, token, "")
	read := false
	for _, n := range page.Notifications {
		read = read || (n.ID == itemID && n.Read && n.EventType == "alert.opened")
	}
	if !read {
		t.Fatalf("the item the browser marked read, %s, in that user's inbox: %+v", itemID, page)
	}
}

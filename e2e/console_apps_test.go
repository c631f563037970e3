package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestConsoleApps drives the applications screens (web/e2e/apps.mjs) in
// headless Chromium against the real control plane, a real Caddy and a
// real agent on this host's Docker engine: create an application through
// the form (after a field error), published on a port its page links to,
// deploy a second image and watch its
// events arrive live, roll back to the first release from the
// deployments list, change the environment without reading its values,
// add a domain and check it, read the traffic and the log, and see the
// same application as a member, read-only. This test checks through the
// API that each of those really happened; axe-core and screenshots run
// on every screen.
func TestConsoleApps(t *testing.T) {
	t.Parallel()
	const host = "shop.test"
	s := newAppStack(t, appStackOptions{
		Images: map[string]int{"v1": 0, "v2": 0},
		DNS:    map[string]string{host: "127.0.0.1"},
	})
	v1, v2 := s.Images["v1"], s.Images["v2"]
	member := createUser(t, s.ControlPlane, "member-apps@example.com", testPassword, false)

	var appID, firstDeployment string
	sent := 0
	publishPort := testlab.FreePort(t)
	steps := runConsoleScript(t, s.Fleet, "apps.mjs", []string{
		"CAPSTAN_IMAGE_V1=" + v1.Ref, "CAPSTAN_IMAGE_V2=" + v2.Ref, "CAPSTAN_HOST=" + host,
		"CAPSTAN_PUBLISH_PORT=" + strconv.Itoa(publishPort),
		"CAPSTAN_MEMBER_EMAIL=" + member.Email, "CAPSTAN_MEMBER_PASSWORD=" + member.Password, "CAPSTAN_MEMBER_TOTP_SECRET=" + member.TOTPSecret,
	}, func(line string, fields []string) {
		arg := func(i int) string {
			if i < len(fields) {
				return fields[i]
			}
			t.Errorf("line %q: no field %d", line, i)
			return ""
		}
		switch fields[0] {
		case "created":
			appID, firstDeployment = arg(1), arg(2)
			d := s.deployment(t, firstDeployment)
			if d.Status != "succeeded" || d.ImageID != v1.ID {
				t.Errorf("the first deployment the console showed succeeded: %s, image %s (want %s)", d.Status, d.ImageID, v1.ID)
			}
		case "published":
			// The address the page links to serves the application.
			if want := fmt.Sprintf("http://127.0.0.1:%d/", publishPort); arg(1) != want {
				t.Errorf("the page links the published port to %s, want %s", arg(1), want)
			}
			s.waitSite(t, &http.Client{Timeout: 10 * time.Second}, arg(1), "v1 one", time.Minute)
		case "deployed-live":
			d := s.deployment(t, arg(1))
			if d.Status != "succeeded" || d.ImageID != v2.ID {
				t.Errorf("the second deployment: %s, image %s (want succeeded, %s)", d.Status, d.ImageID, v2.ID)
			}
			if n, err := strconv.Atoi(arg(2)); err != nil || n == 0 {
				t.Errorf("the console saw %s events arrive while the deployment ran, want some", arg(2))
			}
		case "rolled-back":
			// The rollback made the first release current again: a new
			// deployment of its exact image.
			a := s.appInfo(t, appID)
			if a.Current == nil || deref(a.Current.RollbackOf) != firstDeployment || a.Current.ImageID != v1.ID || a.Current.ID != arg(1) {
				t.Errorf("after the rollback in the console, current is %+v; want deployment %s rolling back to %s with image %s",
					a.Current, arg(1), firstDeployment, v1.ID)
			}
		case "env-saved":
			var a AppInfo
			expectJSON(t, s.Get(t, "/api/v1/applications/"+appID+"?reveal=true", s.Token), http.StatusOK, &a)
			var got []string
			for _, e := range a.Env {
				got = append(got, e.Key+"="+deref(e.Value))
			}
			if strings.Join(got, " ") != "GREETING=two EXTRA=x" {
				t.Errorf("env after the editor saved: %v, want GREETING=two EXTRA=x", got)
			}
		case "domain-added":
			// Requests to the site, for the traffic chart.
			hc := s.Client(t)
			url := s.Caddy.URL("https", host, "/")
			s.waitSite(t, hc, url, "v1 one", time.Minute)
			for range 20 {
				if a, err := fetch(hc, url); err != nil || a.Status != http.StatusOK {
					t.Errorf("GET %s: %+v, %v", url, a, err)
				}
			}
			sent = 21
		case "domain-checked":
			var list struct {
				Domains []DomainInfo `json:"domains"`
			}
			s.Get(t, "/api/v1/domains?application_id="+appID, s.Token).JSON(t, &list)
			if len(list.Domains) != 1 || list.Domains[0].Hostname != host || list.Domains[0].Check == nil {
				t.Errorf("domains after the console's check: %+v", list.Domains)
				break
			}
			if c := list.Domains[0].Check; !slices.Equal(c.Addresses, []string{"127.0.0.1"}) || c.CertNotAfter == nil || c.CertIssuer == "" ||
				!slices.Contains(c.CertDNSNames, host) {
				t.Errorf("the check the console showed: %+v", *c)
			}
		case "traffic-seen":
			if n, err := strconv.Atoi(arg(1)); err != nil || n < sent || sent == 0 {
				t.Errorf("the console showed %s requests, want at least the %d sent", arg(1), sent)
			}
		}
	}, func() string { return "agent log:\n" + s.Agent.Logs() })
	want := "field-error created published deployed-live rolled-back env-saved domain-added domain-checked traffic-seen logs-read member-read-only done"
	if strings.Join(steps, " ") != want {
		t.Fatalf("apps.mjs steps %v, want %s", steps, want)
	}
}

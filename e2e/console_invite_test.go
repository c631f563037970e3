package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestConsoleInvite drives invitations in headless Chromium
// (web/e2e/invite.mjs): an administrator invites from the Users screen
// without an SMTP server and copies the link; the invitee opens it in a
// fresh browser context, chooses a password, reads the second factor's
// secret off the page and enters its code, and lands signed in. Checked
// here through the API: the user exists as a member, signed in once, and
// the acceptance is audited.
func TestConsoleInvite(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	user := createUser(t, f.ControlPlane, "browser-inviter@example.com", testPassword, true)
	const invitee = "invitee-ui@example.com"
	steps := runConsoleScriptAsUser(t, f, "invite.mjs", user, []string{"CAPSTAN_INVITEE=" + invitee}, func(line string, fields []string) {
		if fields[0] == "invited" && (len(fields) != 2 || !strings.HasPrefix(fields[1], f.URL+"/invite#")) {
			t.Errorf("invited line %q: want a link to %s/invite#", line, f.URL)
		}
	}, nil)
	if want := "invited accepted listed done"; strings.Join(steps, " ") != want {
		t.Fatalf("invite.mjs steps %v, want %s", steps, want)
	}
	r := f.Get(t, "/api/v1/users", f.Token)
	var out struct {
		Users []struct {
			Email        string  `json:"email"`
			Admin        bool    `json:"admin"`
			LastSignInAt *string `json:"last_sign_in_at"`
		} `json:"users"`
	}
	expectJSON(t, r, http.StatusOK, &out)
	found := false
	for _, u := range out.Users {
		if u.Email == invitee {
			found = true
			if u.Admin || u.LastSignInAt == nil {
				t.Fatalf("the invitee: %+v; want a member that signed in", u)
			}
		}
	}
	if !found {
		t.Fatalf("the invitee is not a user: %s", r.Body)
	}
	if n := len(auditEntries(t, f.ControlPlane, f.Token, "user.invitation_accepted")); n != 1 {
		t.Fatalf("%d user.invitation_accepted entries, want 1", n)
	}
}

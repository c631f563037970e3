package e2e

import (
	"net/http"
	"testing"
)

// TestUsersManagedThroughAPI: an administrator lists users, makes a
// member an administrator and back, disables a user (whose session ends
// at once) and enables it again, gives it a new second factor (the old
// one stops working) and deletes it, each audited; the last enabled
// administrator can be neither demoted, disabled nor deleted; members
// manage nobody; bad input changes nothing.
func TestUsersManagedThroughAPI(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t, Options{})
	admin := newAdmin(t, cp, "owner@example.com")
	tok := signInUser(t, cp, admin).AccessToken
	member := createUser(t, cp, "dev@example.com", testPassword, false)
	memberSession := signInUser(t, cp, member)

	type userInfo struct {
		ID           string  `json:"id"`
		Email        string  `json:"email"`
		Admin        bool    `json:"admin"`
		Disabled     bool    `json:"disabled"`
		LastSignInAt *string `json:"last_sign_in_at"`
	}
	list := func() map[string]userInfo {
		t.Helper()
		var out struct {
			Users []userInfo `json:"users"`
		}
		expectJSON(t, cp.Get(t, "/api/v1/users", tok), http.StatusOK, &out)
		m := map[string]userInfo{}
		for _, u := range out.Users {
			m[u.Email] = u
		}
		return m
	}
	patch := func(id string, body any) *Response {
		t.Helper()
		return cp.Do(t, Req{Method: http.MethodPatch, Path: "/api/v1/users/" + id, Token: tok, JSON: body})
	}
	users := list()
	if len(users) != 2 || !users[admin.Email].Admin || users[member.Email].Admin || users[member.Email].LastSignInAt == nil {
		t.Fatalf("users: %+v", users)
	}

	// A member manages nobody.
	expectProblem(t, cp.Get(t, "/api/v1/users", memberSession.AccessToken), http.StatusForbidden, "admin-required")

	// The last enabled administrator stays one.
	expectProblem(t, patch(admin.ID, map[string]any{"admin": false}), http.StatusConflict, "last-admin")
	expectProblem(t, patch(admin.ID, map[string]any{"disabled": true}), http.StatusConflict, "last-admin")
	expectProblem(t, cp.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/users/" + admin.ID, Token: tok}), http.StatusConflict, "last-admin")
	// Bad input: nothing to change, or a field of the wrong type.
	expectStatus(t, patch(member.ID, map[string]any{}), http.StatusUnprocessableEntity)
	expectStatus(t, patch(member.ID, map[string]any{"admin": "yes"}), http.StatusUnprocessableEntity)
	expectProblem(t, patch("usr_none", map[string]any{"admin": true}), http.StatusNotFound, "not-found")
	if u := list()[member.Email]; u.Admin || u.Disabled {
		t.Fatalf("refused changes changed the member: %+v", u)
	}

	// Promoted, then back to a member (there is another administrator now).
	// A role change counts from the next request: the demoted owner is a
	// member at once, and the new administrator promotes it back.
	expectStatus(t, patch(member.ID, map[string]any{"admin": true}), http.StatusOK)
	expectStatus(t, patch(admin.ID, map[string]any{"admin": false}), http.StatusOK)
	expectProblem(t, patch(admin.ID, map[string]any{"admin": true}), http.StatusForbidden, "admin-required")
	expectStatus(t, cp.Do(t, Req{Method: http.MethodPatch, Path: "/api/v1/users/" + admin.ID, Token: memberSession.AccessToken,
		JSON: map[string]any{"admin": true}}), http.StatusOK)
	r := patch(member.ID, map[string]any{"admin": false})
	expectStatus(t, r, http.StatusOK)
	var changed userInfo
	r.JSON(t, &changed)
	if changed.Admin || changed.Email != member.Email {
		t.Fatalf("the member after the change: %+v", changed)
	}

	// Disabled: its session ends at once and it cannot sign in; enabled
	// again, it can.
	expectStatus(t, cp.Get(t, "/api/v1/auth/me", memberSession.AccessToken), http.StatusOK)
	expectStatus(t, patch(member.ID, map[string]any{"disabled": true}), http.StatusOK)
	expectStatus(t, cp.Get(t, "/api/v1/auth/me", memberSession.AccessToken), http.StatusUnauthorized)
	r = cp.Post(t, "/api/v1/auth/login", "", map[string]string{"email": member.Email, "password": member.Password})
	expectStatus(t, r, http.StatusUnauthorized)
	expectStatus(t, patch(member.ID, map[string]any{"disabled": false}), http.StatusOK)
	signInUser(t, cp, member)

	// A new second factor: the old secret no longer signs in, the new one does.
	var reset struct {
		TOTPSecret string `json:"totp_secret"`
		TOTPURI    string `json:"totp_uri"`
	}
	expectJSON(t, cp.Post(t, "/api/v1/users/"+member.ID+"/reset-2fa", tok, nil), http.StatusOK, &reset)
	if reset.TOTPSecret == "" || reset.TOTPSecret == member.TOTPSecret || reset.TOTPURI == "" {
		t.Fatalf("reset-2fa answer: %+v", reset)
	}
	challenge := login(t, cp, member.Email, member.Password)
	r = cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{"challenge_id": challenge, "code": totpCode(t, member.TOTPSecret)})
	expectStatus(t, r, http.StatusUnauthorized)
	signIn(t, cp, member.Email, member.Password, reset.TOTPSecret)

	// Deleted: gone from the list, and every change is in the audit log.
	expectStatus(t, cp.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/users/" + member.ID, Token: tok}), http.StatusNoContent)
	if _, ok := list()[member.Email]; ok {
		t.Fatal("the deleted user is still listed")
	}
	for action, want := range map[string]int{"user.role_changed": 4, "user.disabled": 1, "user.enabled": 1, "user.2fa.reset": 1, "user.deleted": 1} {
		if got := len(auditEntries(t, cp, tok, action)); got != want {
			t.Errorf("audit entries %s: %d, want %d", action, got, want)
		}
	}
}

package e2e

import (
	"database/sql"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

type invitationInfo struct {
	ID     string `json:"id"`
	Email  string `json:"email"`
	Admin  bool   `json:"admin"`
	Status string `json:"status"`
	UserID string `json:"user_id"`
}

type inviteAnswer struct {
	Invitation invitationInfo `json:"invitation"`
	Delivery   string         `json:"delivery"`
	Link       string         `json:"link"`
}

type invitationEnrollment struct {
	Email      string `json:"email"`
	TOTPSecret string `json:"totp_secret"`
	TOTPURI    string `json:"totp_uri"`
	QRCode     string `json:"totp_qr_svg"`
}

func invite(t *testing.T, cp *ControlPlane, tok, email string, admin bool) inviteAnswer {
	t.Helper()
	var a inviteAnswer
	expectJSON(t, cp.Post(t, "/api/v1/users/invitations", tok, map[string]any{"email": email, "admin": admin}), http.StatusCreated, &a)
	return a
}

func listInvitations(t *testing.T, cp *ControlPlane, tok string) (map[string]invitationInfo, string) {
	t.Helper()
	r := cp.Get(t, "/api/v1/users/invitations", tok)
	var out struct {
		Invitations []invitationInfo `json:"invitations"`
	}
	expectJSON(t, r, http.StatusOK, &out)
	m := map[string]invitationInfo{}
	for _, i := range out.Invitations {
		if _, ok := m[i.Email]; !ok { // newest first
			m[i.Email] = i
		}
	}
	return m, string(r.Body)
}

func enrollInvitation(t *testing.T, cp *ControlPlane, token string) invitationEnrollment {
	t.Helper()
	var en invitationEnrollment
	expectJSON(t, cp.Post(t, "/api/v1/auth/invitation/enrollment", "", map[string]string{"token": token}), http.StatusOK, &en)
	if en.TOTPSecret == "" || !strings.HasPrefix(en.TOTPURI, "otpauth://totp/") || !strings.HasPrefix(en.QRCode, "<svg") {
		t.Fatalf("enrollment: %+v", en)
	}
	return en
}

func acceptInvitation(t *testing.T, cp *ControlPlane, token, password, code string) *Response {
	t.Helper()
	return cp.Post(t, "/api/v1/auth/invitation/accept", "", map[string]string{"token": token, "password": password, "code": code})
}

var inviteToken = regexp.MustCompile(`/invite#(cin_[0-9a-z]+)`)

// mailedToken waits for the invitation mail to addr and returns its token.
func mailedToken(t *testing.T, s *testlab.SMTPServer, cp *ControlPlane, addr string) string {
	t.Helper()
	var token string
	testlab.Eventually(t, 30*time.Second, "the invitation mail to "+addr, func() bool {
		for _, m := range s.Mails() {
			if len(m.To) != 1 || m.To[0] != addr {
				continue
			}
			// Quoted-printable soft line breaks may split the link.
			body := strings.ReplaceAll(string(m.Data), "=\r\n", "")
			if !strings.Contains(body, "Subject: [Capstan] You are invited") || !strings.Contains(body, cp.URL+"/invite#") {
				t.Fatalf("the invitation mail lacks its subject or link:\n%s", body)
			}
			if found := inviteToken.FindStringSubmatch(body); found != nil {
				token = found[1]
				return true
			}
		}
		return false
	})
	return token
}

// TestInvitationsByEmail: an administrator invites by e-mail (the link is
// mailed, not answered); the invitee reads whom it is for, gets a second
// factor and accepts with a password and a code of it, and is signed in;
// of acceptances sent at once exactly one creates the account; used,
// revoked, expired and unknown tokens are refused alike; an address that
// is a user's or invited already is refused; a refused mail leaves no
// invitation; members invite nobody; everything is audited and no token
// is logged.
func TestInvitationsByEmail(t *testing.T) {
	t.Parallel()
	s := testlab.StartSMTPServer(t)
	cp := startControlPlane(t, smtpOptions(s))
	admin := newAdmin(t, cp, "owner@example.com")
	tok := signInUser(t, cp, admin).AccessToken
	member := createUser(t, cp, "dev@example.com", testPassword, false)
	memberTok := signInUser(t, cp, member).AccessToken

	// Members invite nobody and see no invitations.
	expectProblem(t, cp.Post(t, "/api/v1/users/invitations", memberTok, map[string]any{"email": "x@example.com"}),
		http.StatusForbidden, "admin-required")
	expectProblem(t, cp.Get(t, "/api/v1/users/invitations", memberTok), http.StatusForbidden, "admin-required")

	a := invite(t, cp, tok, "new@example.com", false)
	if a.Delivery != "email" || a.Link != "" || a.Invitation.Status != "pending" || a.Invitation.Email != "new@example.com" {
		t.Fatalf("invite answer: %+v", a)
	}
	token := mailedToken(t, s, cp, "new@example.com")

	// Refused: the address is a user's, invited already, or not one.
	for email, code := range map[string]string{admin.Email: "email-taken", "NEW@example.com": "invitation-pending"} {
		expectProblem(t, cp.Post(t, "/api/v1/users/invitations", tok, map[string]any{"email": email}), http.StatusConflict, code)
	}
	expectStatus(t, cp.Post(t, "/api/v1/users/invitations", tok, map[string]any{"email": "not an address"}), http.StatusUnprocessableEntity)
	// The SMTP server refuses the mailbox: a problem, and no invitation.
	s.Refuse("bounce@example.com")
	for range 2 {
		p := expectProblem(t, cp.Post(t, "/api/v1/users/invitations", tok, map[string]any{"email": "bounce@example.com"}),
			http.StatusBadGateway, "email-failed")
		if !strings.Contains(p.Detail, "550") {
			t.Fatalf("the refused mail's problem does not say why: %+v", p)
		}
	}
	list, body := listInvitations(t, cp, tok)
	if _, ok := list["bounce@example.com"]; ok || list["new@example.com"].Status != "pending" || len(list) != 1 {
		t.Fatalf("invitations: %s", body)
	}
	if strings.Contains(body, token) || strings.Contains(body, "token") {
		t.Fatalf("the list shows tokens: %s", body)
	}

	// The invitee: whom it is for; accepting needs the second factor first.
	r := cp.Post(t, "/api/v1/auth/invitation", "", map[string]string{"token": token})
	var look struct {
		Email string `json:"email"`
		Admin bool   `json:"admin"`
	}
	expectJSON(t, r, http.StatusOK, &look)
	if look.Email != "new@example.com" || look.Admin {
		t.Fatalf("lookup: %s", r.Body)
	}
	expectProblem(t, acceptInvitation(t, cp, token, "a long new passphrase 42", "123456"), http.StatusConflict, "enrollment-required")
	first := enrollInvitation(t, cp, token)
	en := enrollInvitation(t, cp, token) // a second one replaces the first
	if en.TOTPSecret == first.TOTPSecret || en.Email != "new@example.com" {
		t.Fatalf("enrollments: %+v then %+v", first, en)
	}
	// A weak password, a code of the replaced secret and a wrong code are
	// refused and create nobody.
	expectStatus(t, acceptInvitation(t, cp, token, "password1234", totpCode(t, en.TOTPSecret)), http.StatusUnprocessableEntity)
	expectStatus(t, acceptInvitation(t, cp, token, "a long new passphrase 42", totpCode(t, first.TOTPSecret)), http.StatusUnprocessableEntity)

	// Acceptances at once: exactly one is signed in, the others find the
	// invitation used.
	const n = 4
	code := totpCode(t, en.TOTPSecret)
	var wg sync.WaitGroup
	answers := make([]*Response, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = acceptInvitation(t, cp, token, "a long new passphrase 42", code) }()
	}
	wg.Wait()
	var winner *Session
	for _, r := range answers {
		switch r.Status {
		case http.StatusOK:
			if winner != nil {
				t.Fatal("two acceptances of one invitation succeeded")
			}
			winner = &Session{}
			r.JSON(t, winner)
			if r.Cookie(refreshCookieName) == nil {
				t.Fatalf("the acceptance sets no refresh cookie: %v", r.Header)
			}
		default:
			expectProblem(t, r, http.StatusNotFound, "invalid-invitation")
		}
	}
	if winner == nil {
		t.Fatal("no acceptance succeeded")
	}
	r = cp.Get(t, "/api/v1/auth/me", winner.AccessToken)
	expectStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.Body), `"email":"new@example.com"`) || !strings.Contains(string(r.Body), `"admin":false`) {
		t.Fatalf("the invitee's session: %s", r.Body)
	}
	// The invitee signs in again with the password and the secret.
	signIn(t, cp, "new@example.com", "a long new passphrase 42", en.TOTPSecret)

	// Used, revoked, expired and unknown tokens are refused alike.
	revoked := invite(t, cp, tok, "revoked@example.com", false)
	revokedToken := mailedToken(t, s, cp, "revoked@example.com")
	expectStatus(t, cp.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/users/invitations/" + revoked.Invitation.ID, Token: tok}), http.StatusNoContent)
	expectProblem(t, cp.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/users/invitations/" + revoked.Invitation.ID, Token: tok}),
		http.StatusNotFound, "not-found")
	expectProblem(t, cp.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/users/invitations/" + a.Invitation.ID, Token: tok}),
		http.StatusConflict, "invitation-accepted")
	expired := invite(t, cp, tok, "late@example.com", false)
	expiredToken := mailedToken(t, s, cp, "late@example.com")
	ageInvitation(t, cp, expired.Invitation.ID)
	for name, tk := range map[string]string{"used": token, "revoked": revokedToken, "expired": expiredToken, "unknown": "cin_nothing"} {
		expectProblem(t, cp.Post(t, "/api/v1/auth/invitation", "", map[string]string{"token": tk}), http.StatusNotFound, "invalid-invitation")
		r := cp.Post(t, "/api/v1/auth/invitation/enrollment", "", map[string]string{"token": tk})
		if r.Status != http.StatusNotFound {
			t.Fatalf("enrollment of a %s token: %d %s", name, r.Status, r.Body)
		}
	}
	list, body = listInvitations(t, cp, tok)
	if list["new@example.com"].Status != "accepted" || list["new@example.com"].UserID != winner.User.ID ||
		list["revoked@example.com"].Status != "revoked" || list["late@example.com"].Status != "expired" {
		t.Fatalf("invitations: %s", body)
	}
	// An expired or revoked invitation's address can be invited again.
	invite(t, cp, tok, "late@example.com", true)
	invite(t, cp, tok, "revoked@example.com", false)

	for action, want := range map[string]int{"user.invited": 5, "user.invitation_revoked": 1, "user.invitation_accepted": 1} {
		if got := len(auditEntries(t, cp, tok, action)); got != want {
			t.Errorf("audit entries %s: %d, want %d", action, got, want)
		}
	}
	for _, tk := range []string{token, revokedToken, expiredToken} {
		if strings.Contains(cp.Logs(), tk) {
			t.Fatal("the control plane logged an invitation token")
		}
	}
}

// ageInvitation makes an invitation expire, as 72 hours would.
func ageInvitation(t *testing.T, cp *ControlPlane, id string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(cp.DataDir, store.FileName)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE user_invitations SET expires_at = ? WHERE id = ?`, time.Now().Add(-time.Minute).UnixMilli(), id)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("aged %d invitations, want 1", n)
	}
}

// TestInvitationsByLink: without an SMTP server the answer carries the
// link, to the console's accept page under the public URL, and an
// administrator's invitation makes an administrator.
func TestInvitationsByLink(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t, Options{})
	admin := newAdmin(t, cp, "owner@example.com")
	tok := signInUser(t, cp, admin).AccessToken
	a := invite(t, cp, tok, "ops@example.com", true)
	if a.Delivery != "link" || !strings.HasPrefix(a.Link, cp.URL+"/invite#cin_") {
		t.Fatalf("invite answer: %+v", a)
	}
	token := strings.TrimPrefix(a.Link, cp.URL+"/invite#")
	en := enrollInvitation(t, cp, token)
	r := acceptInvitation(t, cp, token, "another long passphrase 7", totpCode(t, en.TOTPSecret))
	expectStatus(t, r, http.StatusOK)
	var sess Session
	r.JSON(t, &sess)
	if !sess.User.Admin || sess.User.Email != "ops@example.com" {
		t.Fatalf("the invitee: %+v", sess.User)
	}
	// The new administrator manages users at once.
	expectStatus(t, cp.Get(t, "/api/v1/users/invitations", sess.AccessToken), http.StatusOK)
	// The console serves its accept page there.
	r = cp.Get(t, "/invite", "")
	expectStatus(t, r, http.StatusOK)
}

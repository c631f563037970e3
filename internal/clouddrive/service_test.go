package clouddrive_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/clouddrive"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

type rig struct {
	svc    *clouddrive.Service
	drive  *testlab.CloudDrive
	caller audit.Caller
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := context.Background()
	st := storetest.Open(t, store.SQLite)
	now := func() time.Time { return time.Now().UTC() }
	drive := testlab.StartCloudDrive(t)
	svc, err := clouddrive.NewService(st, secrets.GenerateKey(), audit.NewLog(st, now), clouddrive.Config{
		ClientID: drive.ClientID, ClientSecret: drive.ClientSecret, AuthURL: drive.AuthURL(), TokenURL: drive.TokenURL(),
		RevokeURL: drive.RevokeURL(), APIURL: drive.URL, PublicURL: "https://cp.example.test", HTTPClient: drive.Client}, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := now()
	a := auth.Account{User: auth.User{ID: ids.New(ids.User), Email: "admin@example.com", Admin: true, CreatedAt: at},
		PasswordHash: "$argon2id$test", TOTPSecret: "sealed", UpdatedAt: at}
	if err := st.CreateAccount(ctx, a); err != nil {
		t.Fatal(err)
	}
	sess := auth.Session{ID: ids.New(ids.Session), UserID: a.ID, CreatedAt: at, LastUsedAt: at, ExpiresAt: at.Add(time.Hour)}
	if err := st.CreateSession(ctx, sess, auth.RefreshToken{Hash: ids.Hash(ids.Token("crt")), SessionID: sess.ID, CreatedAt: at},
		auth.AccessToken{Hash: ids.Hash(ids.Token("cat")), SessionID: sess.ID, UserID: a.ID, CreatedAt: at, ExpiresAt: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return &rig{svc: svc, drive: drive, caller: audit.Caller{Actor: audit.Actor{Type: audit.ActorUser, ID: a.ID}, SessionID: sess.ID}}
}

// connect goes through the sign-in as a browser would.
func (r *rig) connect(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	consent, browser, err := r.svc.Connect(ctx, r.caller)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.drive.Client.Get(consent.ConsentURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("consent page: %d, %v", resp.StatusCode, err)
	}
	q := loc.Query()
	if _, err := r.svc.Complete(ctx, clouddrive.Callback{Code: q.Get("code"), State: q.Get("state")}, browser, audit.Caller{}); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) tokenRequests() int {
	n := 0
	for _, req := range r.drive.Requests() {
		if req == "POST /token" {
			n++
		}
	}
	return n
}

// TestAccessToken: access tokens are minted from the refresh token when
// the cached one has less than TokenMargin left; they work at the Drive API; a revoked grant and no connection
// are conflicts a caller can act on.
func TestAccessToken(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	if _, _, err := r.svc.AccessToken(ctx); fault.KindOf(err) != fault.Conflict || fault.As(err).Code != "clouddrive-not-connected" {
		t.Fatalf("not connected: got %v", err)
	}
	// Tokens that live an hour: the one of the code exchange is used.
	r.connect(t)
	before := r.tokenRequests()
	tok, exp, err := r.svc.AccessToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.tokenRequests(), before; got != want {
		t.Fatalf("token requests: %d, want %d (the exchanged token is fresh)", got, want)
	}
	if !strings.HasPrefix(tok, "ya29.") || time.Until(exp) < 50*time.Minute {
		t.Fatalf("token %q expiring %v", tok, exp)
	}

	// Tokens that live less than the margin: every call mints.
	r2 := newRig(t)
	r2.drive.SetTokenTTL(clouddrive.TokenMargin / 2)
	r2.connect(t)
	for range 2 {
		before = r2.tokenRequests()
		if tok, _, err = r2.svc.AccessToken(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := r2.tokenRequests()-before, 1; got != want {
			t.Fatalf("token requests for a stale token: %d, want %d", got, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, r2.drive.URL+"/drive/v3/about?fields=user(emailAddress)", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := r2.drive.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the minted token is refused by the API: %d", resp.StatusCode)
	}

	// A grant revoked at the provider.
	for _, rt := range r2.drive.RefreshTokens() {
		resp, err := r2.drive.Client.PostForm(r2.drive.RevokeURL(), url.Values{"token": {rt}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if _, _, err := r2.svc.AccessToken(ctx); fault.KindOf(err) != fault.Conflict || fault.As(err).Code != "clouddrive-grant-revoked" {
		t.Fatalf("revoked grant: got %v", err)
	}
}

// TestAccessTokenMintsOnceForConcurrentCallers: callers that find the
// cache stale at once wait for one mint.
func TestAccessTokenMintsOnceForConcurrentCallers(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	// The exchanged token is stale at once; the minted ones last.
	r.drive.SetTokenTTL(clouddrive.TokenMargin / 2)
	r.connect(t)
	r.drive.SetTokenTTL(time.Hour)
	before := r.tokenRequests()
	var wg sync.WaitGroup
	got := make([]string, 16)
	for i := range got {
		wg.Go(func() {
			tok, _, err := r.svc.AccessToken(ctx)
			if err != nil {
				t.Error(err)
			}
			got[i] = tok
		})
	}
	wg.Wait()
	if n := r.tokenRequests() - before; n != 1 {
		t.Fatalf("%d token requests for %d concurrent callers, want 1", n, len(got))
	}
	for _, tok := range got {
		if tok != got[0] {
			t.Fatalf("callers got different tokens: %q and %q", got[0], tok)
		}
	}
}

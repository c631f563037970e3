package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/platform"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// A TOTP secret sealed with another key than the server's (a user created
// by a command run with the wrong key) fails the second sign-in step with
// a key-mismatch problem that names the remedy, and the log names both
// key ids; the problem does not.
func TestSignInSecretSealedWithAnotherKey(t *testing.T) {
	e := newTestEnv(t, envOptions{}).serve(t)
	other := secrets.GenerateKey()
	stranger := auth.NewService(e.store, other, audit.NewLog(e.store, e.clock.Now), e.clock.Now, platform.Name)
	u, en, err := stranger.CreateUser(context.Background(), audit.Caller{Actor: audit.Actor{Type: audit.ActorSystem, ID: "test"}},
		"alice@example.com", testPassword, false)
	if err != nil {
		t.Fatal(err)
	}

	challenge := e.login(t, u.Email)
	r := e.request(t, http.MethodPost, "/api/v1/auth/2fa/verify", "", map[string]string{
		"challenge_id": challenge, "code": e.code(t, en.Secret)})
	p := expectProblem(t, r, http.StatusInternalServerError, "key-mismatch")
	for _, want := range []string{"--data-dir", "CAPSTAN_SECRET_KEY"} {
		if !strings.Contains(p.Detail, want) {
			t.Fatalf("detail %q does not name %s", p.Detail, want)
		}
	}
	if strings.Contains(string(r.body), other.ID()) {
		t.Fatalf("the problem names a key id: %s", r.body)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, `"sealed_with":"`+other.ID()+`"`) || !strings.Contains(logs, p.RequestID) {
		t.Fatalf("the log does not name the sealing key %s with request id %s:\n%s", other.ID(), p.RequestID, logs)
	}
}

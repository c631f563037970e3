package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// clientAt returns an HTTP client whose connections leave from the
// loopback address ip. Linux routes all of 127.0.0.0/8 to lo, so the
// control plane sees ip as the client's address, as it would see another
// machine; no X-Forwarded-For is involved.
func clientAt(t testing.TB, ip string) *http.Client {
	t.Helper()
	local := net.ParseIP(ip)
	if local == nil || !local.IsLoopback() {
		t.Fatalf("client address %q is not a loopback address", ip)
	}
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: local}}
	tr := &http.Transport{Proxy: nil, DialContext: d.DialContext, MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// postFrom sends a JSON POST with client and reads the whole response. It
// returns errors rather than failing, so that goroutines can call it.
func postFrom(cp *ControlPlane, client *http.Client, path, token string, body any) (*Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodPost, cp.URL+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: rb}, nil
}

// mustPostFrom is postFrom for the test goroutine.
func mustPostFrom(t testing.TB, cp *ControlPlane, client *http.Client, path, token string, body any) *Response {
	t.Helper()
	r, err := postFrom(cp, client, path, token, body)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return r
}

// signInFrom signs u in, password and code, from client.
func signInFrom(t testing.TB, cp *ControlPlane, client *http.Client, u User) string {
	t.Helper()
	r := mustPostFrom(t, cp, client, "/api/v1/auth/login", "", map[string]string{"email": u.Email, "password": u.Password})
	expectStatus(t, r, http.StatusOK)
	var ch struct {
		ChallengeID string `json:"challenge_id"`
	}
	r.JSON(t, &ch)
	r = mustPostFrom(t, cp, client, "/api/v1/auth/2fa/verify", "", map[string]string{
		"challenge_id": ch.ChallengeID, "code": totpCode(t, u.TOTPSecret)})
	expectStatus(t, r, http.StatusOK)
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	r.JSON(t, &tok)
	if tok.AccessToken == "" {
		t.Fatalf("verify: no access token in %s", r.Body)
	}
	return tok.AccessToken
}

// statusCounts tallies responses of parallel requests by status and
// problem type, and checks that every 429 carries a Retry-After.
type statusCounts struct {
	mu     sync.Mutex
	counts map[string]int // "401 invalid-credentials", "429 too-many-attempts", "200"
	errs   []string
}

func (s *statusCounts) add(r *Response, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	if err != nil {
		s.errs = append(s.errs, err.Error())
		return
	}
	key := strconv.Itoa(r.Status)
	var p Problem
	if json.Unmarshal(r.Body, &p) == nil && strings.HasPrefix(p.Type, problemBase) {
		key += " " + strings.TrimPrefix(p.Type, problemBase)
	}
	if r.Status == http.StatusTooManyRequests {
		if after, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || after < 1 {
			s.errs = append(s.errs, fmt.Sprintf("429 with Retry-After %q", r.Header.Get("Retry-After")))
		}
	}
	s.counts[key]++
}

func (s *statusCounts) check(t testing.TB) map[string]int {
	t.Helper()
	if len(s.errs) > 0 {
		t.Fatalf("%d requests went wrong, first: %s", len(s.errs), s.errs[0])
	}
	return s.counts
}

// countFor counts the audit entries of user.
func countFor(entries []AuditEntry, userID string) int {
	n := 0
	for _, e := range entries {
		if e.Actor.ID == userID {
			n++
		}
	}
	return n
}

// TestSignInParallelWrongPasswords: 120 wrong passwords for one account
// sent at once from one address get the burst's worth of password checks,
// the rest 429 with Retry-After; meanwhile the account's owner signs in
// from another address while the attack goes on.
func TestSignInParallelWrongPasswords(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		cp := startControlPlane(t, Options{Dialect: d})
		admin := newAdmin(t, cp, "admin@example.com")
		so := signInUser(t, cp, newAdmin(t, cp, "ops@example.com"))
		attacker := clientAt(t, "127.0.0.1")
		owner := clientAt(t, "127.0.0.2")

		const n = 120
		var got statusCounts
		testlab.InParallel(n, func(i int) {
			got.add(postFrom(cp, attacker, "/api/v1/auth/login", "", map[string]string{
				"email": admin.Email, "password": "wrong password " + strconv.Itoa(i)}))
		})
		counts := got.check(t)
		if got, want := counts["401 invalid-credentials"], auth.ClientBurst; got != want {
			t.Fatalf("invalid-credentials among %d parallel wrong logins: got %d, want %d (all: %v)", n, got, want, counts)
		}
		if got, want := counts["429 too-many-attempts"], n-auth.ClientBurst; got != want {
			t.Fatalf("too-many-attempts among %d parallel wrong logins: got %d, want %d (all: %v)", n, got, want, counts)
		}
		// Each evaluated wrong password leaves one audit entry.
		checked := countFor(auditEntries(t, cp, so.AccessToken, "auth.login.failed"), admin.ID)
		t.Logf("%s: password checks for %d parallel wrong logins: %d", d, n, checked)
		if got, want := checked, auth.ClientBurst; got != want {
			t.Fatalf("auth.login.failed entries for %d parallel wrong logins: got %d, want %d", n, got, want)
		}

		// The attack goes on from two addresses while the owner signs in.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var seen sync.WaitGroup
		var attack statusCounts
		attackStart := time.Now()
		for _, ip := range []string{"127.0.0.1", "127.0.0.3"} {
			c := clientAt(t, ip)
			wg.Add(1)
			seen.Add(1)
			go func() {
				defer wg.Done()
				first := true
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					r, err := postFrom(cp, c, "/api/v1/auth/login", "", map[string]string{
						"email": admin.Email, "password": "another guess " + strconv.Itoa(i)})
					attack.add(r, err)
					if first && (err != nil || r.Status == http.StatusTooManyRequests) {
						first = false
						seen.Done() // this address is being throttled now
					}
				}
			}()
		}
		seen.Wait()
		token := signInFrom(t, cp, owner, admin)
		close(stop)
		wg.Wait()
		elapsed := time.Since(attackStart)
		attack.check(t)
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", token), http.StatusOK)

		// The second address had its burst; each address gets one more
		// token a minute.
		failed := countFor(auditEntries(t, cp, so.AccessToken, "auth.login.failed"), admin.ID)
		max := 2*auth.ClientBurst + 2*int(elapsed/time.Minute+1)
		t.Logf("%s: %d failed sign-ins checked in all; answers during the owner's sign-in: %v", d, failed, attack.counts)
		if failed > max {
			t.Fatalf("auth.login.failed entries: got %d, want at most %d", failed, max)
		}
	})
}

// TestSignInParallelWrongCodes: wrong TOTP codes sent at once on one
// challenge, each from its own address so no address throttle interferes,
// get MaxCodeFailures checks; the challenge is used up afterwards.
func TestSignInParallelWrongCodes(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		cp := startControlPlane(t, Options{Dialect: d})
		admin := newAdmin(t, cp, "admin@example.com")
		ops := newAdmin(t, cp, "ops@example.com")
		challenge := login(t, cp, admin.Email, admin.Password)
		wrong := wrongCode(t, admin.TOTPSecret)

		const n = 20
		clients := make([]*http.Client, n)
		for i := range clients {
			clients[i] = clientAt(t, fmt.Sprintf("127.0.2.%d", i+1))
		}
		var got statusCounts
		testlab.InParallel(n, func(i int) {
			got.add(postFrom(cp, clients[i], "/api/v1/auth/2fa/verify", "", map[string]string{
				"challenge_id": challenge, "code": wrong}))
		})
		counts := got.check(t)
		if got, want := counts["401 invalid-code"], auth.MaxCodeFailures; got != want {
			t.Fatalf("invalid-code among %d parallel wrong codes: got %d, want %d (all: %v)", n, got, want, counts)
		}
		if got, want := counts["401 invalid-challenge"], n-auth.MaxCodeFailures; got != want {
			t.Fatalf("invalid-challenge among %d parallel wrong codes: got %d, want %d (all: %v)", n, got, want, counts)
		}
		r := cp.Post(t, "/api/v1/auth/2fa/verify", "", map[string]string{
			"challenge_id": challenge, "code": totpCode(t, admin.TOTPSecret)})
		expectProblem(t, r, http.StatusUnauthorized, "invalid-challenge")

		so := signInUser(t, cp, ops)
		if got, want := countFor(auditEntries(t, cp, so.AccessToken, "auth.2fa.failed"), admin.ID), auth.MaxCodeFailures; got != want {
			t.Fatalf("auth.2fa.failed entries: got %d, want %d", got, want)
		}
	})
}

// TestSignInLockAndUnlock: LockAfterFailures failed sign-ins in a row,
// from many addresses, lock the account even for the right password from
// an address that never failed; capstan user unlock lifts the lock; both
// are audited.
func TestSignInLockAndUnlock(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		cp := startControlPlane(t, Options{Dialect: d})
		admin := newAdmin(t, cp, "admin@example.com")
		ops := newAdmin(t, cp, "ops@example.com")
		so := signInUser(t, cp, ops)

		// ClientBurst wrong passwords from each address, one after another;
		// the addresses in parallel.
		addresses := auth.LockAfterFailures / auth.ClientBurst
		var got statusCounts
		testlab.InParallel(addresses, func(a int) {
			c := clientAt(t, fmt.Sprintf("127.0.3.%d", a+1))
			for i := range auth.ClientBurst {
				got.add(postFrom(cp, c, "/api/v1/auth/login", "", map[string]string{
					"email": admin.Email, "password": "guess " + strconv.Itoa(i)}))
			}
		})
		counts := got.check(t)
		if got, want := counts["401 invalid-credentials"], auth.LockAfterFailures; got != want {
			t.Fatalf("invalid-credentials: got %d, want %d (all: %v)", got, want, counts)
		}

		owner := clientAt(t, "127.0.0.2")
		r := mustPostFrom(t, cp, owner, "/api/v1/auth/login", "", map[string]string{"email": admin.Email, "password": admin.Password})
		expectProblem(t, r, http.StatusTooManyRequests, "account-locked")
		if after, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || after < 1 {
			t.Fatalf("Retry-After: got %q, want an integer >= 1", r.Header.Get("Retry-After"))
		}
		locked := auditEntries(t, cp, so.AccessToken, "user.locked")
		if len(locked) != 1 || locked[0].Target.ID != admin.ID || locked[0].Actor.Type != "system" {
			t.Fatalf("user.locked entries: got %+v, want one for the administrator by the system", locked)
		}
		if !strings.HasPrefix(locked[0].IP, "127.0.3.") {
			t.Fatalf("user.locked ip: got %q, want the address of the attempt that reached the ceiling", locked[0].IP)
		}
		var users []struct {
			Email  string `json:"email"`
			Locked bool   `json:"locked"`
		}
		res := cp.CLI(t, "", append([]string{"user", "list", "--json"}, cp.StoreArgs()...)...)
		if err := json.Unmarshal([]byte(res.Stdout), &users); err != nil || res.ExitCode != 0 {
			t.Fatalf("user list --json: exit %d, %v: %s %s", res.ExitCode, err, res.Stdout, res.Stderr)
		}
		for _, u := range users {
			if got, want := u.Locked, u.Email == admin.Email; got != want {
				t.Fatalf("user list: %s locked %v, want %v", u.Email, got, want)
			}
		}

		res = cp.CLI(t, "", append([]string{"user", "unlock", "--email", admin.Email}, cp.StoreArgs()...)...)
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, "Unlocked "+admin.Email) {
			t.Fatalf("user unlock: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		unlocked := auditEntries(t, cp, so.AccessToken, "user.unlocked")
		if len(unlocked) != 1 || unlocked[0].Target.ID != admin.ID || unlocked[0].Actor.Type != "system" ||
			unlocked[0].Details["was_locked"] != true {
			t.Fatalf("user.unlocked entries: got %+v, want one for the administrator by the system", unlocked)
		}
		signInFrom(t, cp, owner, admin)

		res = cp.CLI(t, "", append([]string{"user", "unlock", "--email", "nobody@example.com"}, cp.StoreArgs()...)...)
		if res.ExitCode == 0 {
			t.Fatal("user unlock of an unknown user: exit 0, want non-zero")
		}
	})
}

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
// untilClosed calls fn(0), fn(1), … in a goroutine of wg until stop is
// closed.
func untilClosed(wg *sync.WaitGroup, stop <-chan struct{}, fn func(n int)) {
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			fn(n)
		}
	})
}

func postFrom(cp *ControlPlane, client *http.Client, path, token string, body any) (*Response, error) {
	return postWith(cp, client, path, token, body, nil)
}

// postWith is postFrom sending cookies (and X-Forwarded-For when
// header holds it).
func postWith(cp *ControlPlane, client *http.Client, path, token string, body any, header http.Header, cookies ...*http.Cookie) (*Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodPost, cp.URL+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, c := range cookies {
		req.AddCookie(c)
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
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
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
		t.Logf("%s: password checks for %d parallel wrong logins: %d", cp.Dialect, n, checked)
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
		t.Logf("%s: %d failed sign-ins checked in all; answers during the owner's sign-in: %v", cp.Dialect, failed, attack.counts)
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
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
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

// deviceCookieName is the device cookie's name on a control plane whose
// public URL is http://.
const deviceCookieName = "capstan_device"

// signInDevice signs u in from client sending the device cookie device
// (nil for none), and returns the access token and the device cookie the
// sign-in set.
func signInDevice(t testing.TB, cp *ControlPlane, client *http.Client, u User, device *http.Cookie) (string, *http.Cookie) {
	t.Helper()
	var cookies []*http.Cookie
	if device != nil {
		cookies = append(cookies, &http.Cookie{Name: device.Name, Value: device.Value})
	}
	r, err := postWith(cp, client, "/api/v1/auth/login", "", map[string]string{"email": u.Email, "password": u.Password}, nil, cookies...)
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, r, http.StatusOK)
	var ch struct {
		ChallengeID string `json:"challenge_id"`
	}
	r.JSON(t, &ch)
	r, err = postWith(cp, client, "/api/v1/auth/2fa/verify", "", map[string]string{
		"challenge_id": ch.ChallengeID, "code": totpCode(t, u.TOTPSecret)}, nil, cookies...)
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, r, http.StatusOK)
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	r.JSON(t, &tok)
	c := r.Cookie(deviceCookieName)
	if c == nil || !strings.HasPrefix(c.Value, "cdv_") || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.MaxAge <= 0 {
		t.Fatalf("verify set no device cookie; Set-Cookie: %q", r.Header.Values("Set-Cookie"))
	}
	return tok.AccessToken, c
}

// strangersAttack makes failed sign-ins to email, ClientBurst one after
// another from each of addresses loopback addresses 127.0.<base>.x, the
// addresses in parallel, and tallies the answers.
func strangersAttack(t testing.TB, cp *ControlPlane, email string, base, addresses int) map[string]int {
	t.Helper()
	var got statusCounts
	testlab.InParallel(addresses, func(a int) {
		c := clientAt(t, fmt.Sprintf("127.%d.%d.%d", base, a/250, a%250+1))
		for i := range auth.ClientBurst {
			got.add(postFrom(cp, c, "/api/v1/auth/login", "", map[string]string{
				"email": email, "password": "guess " + strconv.Itoa(i)}))
		}
	})
	return got.check(t)
}

// TestSignInStrangersCannotLockOutOwner: strangers' failures from many
// addresses, more than AccountBurst of them, delay strangers (the right
// password included, and an unknown e-mail address answers exactly the
// same) but never the owner signing in from a device that signed in
// before; the delay passes with time, or at once with capstan user unlock.
func TestSignInStrangersCannotLockOutOwner(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		admin := newAdmin(t, cp, "admin@example.com")
		so := signInUser(t, cp, newAdmin(t, cp, "ops@example.com"))
		owner := clientAt(t, "127.0.0.2")
		_, device := signInDevice(t, cp, owner, admin, nil)

		addresses := auth.AccountBurst/auth.ClientBurst + 5
		for _, email := range []string{admin.Email, "nobody@example.com"} {
			counts := strangersAttack(t, cp, email, 3, addresses)
			if got, want := counts["401 invalid-credentials"], auth.AccountBurst; got != want {
				t.Fatalf("%s: invalid-credentials: got %d, want %d (all: %v)", email, got, want, counts)
			}
			if got, want := counts["429 too-many-attempts"], addresses*auth.ClientBurst-auth.AccountBurst; got != want {
				t.Fatalf("%s: too-many-attempts: got %d, want %d (all: %v)", email, got, want, counts)
			}
		}
		// A stranger with the right password is delayed like one with the
		// wrong password for an account that does not exist.
		stranger := clientAt(t, "127.0.0.4")
		known := mustPostFrom(t, cp, stranger, "/api/v1/auth/login", "", map[string]string{"email": admin.Email, "password": admin.Password})
		unknown := mustPostFrom(t, cp, stranger, "/api/v1/auth/login", "", map[string]string{"email": "nobody@example.com", "password": admin.Password})
		pk := expectProblem(t, known, http.StatusTooManyRequests, "too-many-attempts")
		pu := expectProblem(t, unknown, http.StatusTooManyRequests, "too-many-attempts")
		if pk.Detail != pu.Detail || known.Header.Get("Retry-After") == "" {
			t.Fatalf("known and unknown accounts answer differently: %s (Retry-After %q) vs %s", known.Body, known.Header.Get("Retry-After"), unknown.Body)
		}
		if after, err := strconv.Atoi(known.Header.Get("Retry-After")); err != nil || after < 1 || after > 30 {
			t.Fatalf("Retry-After: got %q, want 1 to 30 s", known.Header.Get("Retry-After"))
		}

		// The owner signs in from the known device, while the attack goes on.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 4 {
			c := clientAt(t, fmt.Sprintf("127.0.5.%d", i+1))
			untilClosed(&wg, stop, func(n int) {
				_, _ = postFrom(cp, c, "/api/v1/auth/login", "", map[string]string{"email": admin.Email, "password": "more " + strconv.Itoa(n)})
			})
		}
		start := time.Now()
		token, again := signInDevice(t, cp, owner, admin, device)
		took := time.Since(start)
		close(stop)
		wg.Wait()
		t.Logf("%s: owner's sign-in (password and code) from the known device during the attack: %v", cp.Dialect, took)
		expectStatus(t, cp.Get(t, "/api/v1/auth/me", token), http.StatusOK)
		if again.Value != device.Value {
			t.Fatalf("device cookie after a sign-in from it: got a new one, want it kept")
		}
		// No account is locked: there is nothing to show in the user list.
		res := cp.CLI(t, "", append([]string{"user", "list", "--json"}, cp.StoreArgs()...)...)
		if res.ExitCode != 0 || strings.Contains(res.Stdout, "locked") {
			t.Fatalf("user list --json: exit %d: %s %s", res.ExitCode, res.Stdout, res.Stderr)
		}

		// capstan user unlock lifts the delay at once.
		res = cp.CLI(t, "", append([]string{"user", "unlock", "--email", admin.Email}, cp.StoreArgs()...)...)
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, "Unlocked "+admin.Email) {
			t.Fatalf("user unlock: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		unlocked := auditEntries(t, cp, so.AccessToken, "user.unlocked")
		if len(unlocked) != 1 || unlocked[0].Target.ID != admin.ID || unlocked[0].Actor.Type != "system" || unlocked[0].Details["had_failures"] != true {
			t.Fatalf("user.unlocked entries: got %+v, want one for the administrator by the system", unlocked)
		}
		signInFrom(t, cp, stranger, admin)
		// The unknown address's delay passes by itself: one attempt every
		// 30 s comes back.
		testlab.Eventually(t, 45*time.Second, "a stranger's attempt on the unknown address after the delay", func() bool {
			r := mustPostFrom(t, cp, stranger, "/api/v1/auth/login", "", map[string]string{"email": "nobody@example.com", "password": "one more"})
			return r.Status == http.StatusUnauthorized
		})

		res = cp.CLI(t, "", append([]string{"user", "unlock", "--email", "nobody@example.com"}, cp.StoreArgs()...)...)
		if res.ExitCode == 0 {
			t.Fatal("user unlock of an unknown user: exit 0, want non-zero")
		}
	})
}

// TestSignInThrottlesIPv6By64: behind a trusted proxy, IPv6 clients are
// throttled by their /64: another address of it is refused, an address of
// another /64 is not.
func TestSignInThrottlesIPv6By64(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t, Options{Args: []string{"--trusted-proxy"}})
	admin := newAdmin(t, cp, "admin@example.com")
	from := func(ip, password string) *Response {
		t.Helper()
		r, err := postWith(cp, cp.Client, "/api/v1/auth/login", "", map[string]string{"email": admin.Email, "password": password},
			http.Header{"X-Forwarded-For": {ip}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i := range auth.ClientBurst {
		expectProblem(t, from(fmt.Sprintf("2001:db8:1:2::%x", i+1), "wrong "+strconv.Itoa(i)), http.StatusUnauthorized, "invalid-credentials")
	}
	expectProblem(t, from("2001:db8:1:2:ffff:ffff:ffff:fffe", admin.Password), http.StatusTooManyRequests, "too-many-attempts")
	expectStatus(t, from("2001:db8:1:3::1", admin.Password), http.StatusOK)
}

package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
)

// BenchmarkSignIn measures complete sign-ins (login, then 2fa/verify) over
// loopback HTTP against SQLite, from parallel clients. A TOTP code is
// accepted once per user and time step, so every iteration signs in its own
// user, created before the timer starts. The clock stands still.
//
// Reported: req/s (HTTP requests, two per sign-in) and signins/s. Login
// costs one argon2id hash (m=19 MiB, t=2), which dominates.
func BenchmarkSignIn(b *testing.B) {
	e := newTestEnv(b, envOptions{}).serve(b)
	type user struct{ email, secret string }
	users := make([]user, b.N)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	errs := make(chan error, b.N)
	for i := range users {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			email := fmt.Sprintf("bench%d@example.com", i)
			_, en, err := e.auth.CreateUser(context.Background(), audit.Caller{Actor: audit.Actor{Type: audit.ActorSystem, ID: "bench"}}, email, testPassword, false)
			users[i] = user{email, en.Secret}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	code := make([]string, b.N)
	for i, u := range users {
		c, err := auth.TOTPCode(u.secret, e.clock.Now())
		if err != nil {
			b.Fatal(err)
		}
		code[i] = c
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256}}
	b.Cleanup(client.CloseIdleConnections)

	post := func(path string, body any, out any) error {
		j, _ := json.Marshal(body)
		resp, err := client.Post(e.ts.URL+path, "application/json", bytes.NewReader(j))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, data)
		}
		return json.Unmarshal(data, out)
	}

	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			u := users[i]
			var ch struct {
				ChallengeID string `json:"challenge_id"`
			}
			if err := post("/api/v1/auth/login", map[string]string{"email": u.email, "password": testPassword}, &ch); err != nil {
				b.Error(err)
				return
			}
			var tok struct {
				AccessToken string `json:"access_token"`
			}
			if err := post("/api/v1/auth/2fa/verify", map[string]string{"challenge_id": ch.ChallengeID, "code": code[i]}, &tok); err != nil {
				b.Error(err)
				return
			}
			if tok.AccessToken == "" {
				b.Error("no access token")
				return
			}
		}
	})
	b.StopTimer()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(2*b.N)/s, "req/s")
		b.ReportMetric(float64(b.N)/s, "signins/s")
	}
}

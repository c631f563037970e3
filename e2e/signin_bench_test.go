package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// BenchmarkOwnerSignInUnderAttack measures the account owner's sign-in
// (the password step, from the device that signed in before) while
// strangers on 1,536 addresses send wrong passwords for the owner's e-mail
// address and for e-mail addresses with no account, as fast as they are
// answered: every attempt a password hash until the throttles refuse it,
// so the strangers' hashing queue stays full. It reports the owner's
// latency (p50, p99) under the attack and, for comparison, before it,
// and what the strangers were answered.
func BenchmarkOwnerSignInUnderAttack(b *testing.B) {
	cp := startControlPlane(b, Options{})
	admin := newAdmin(b, cp, "admin@example.com")
	owner := clientAt(b, "127.0.0.2")
	_, device := signInDevice(b, cp, owner, admin, nil)

	// More strangers at once than the hashing queue takes (8 hashing, 32
	// waiting), so that some are told sign-in-busy.
	cookie := &http.Cookie{Name: device.Name, Value: device.Value}
	body := map[string]string{"email": admin.Email, "password": admin.Password}
	signIn := func() time.Duration {
		start := time.Now()
		r, err := postWith(cp, owner, "/api/v1/auth/login", "", body, nil, cookie)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		expectStatus(b, r, http.StatusOK)
		return took
	}
	var idle []time.Duration
	for range 20 {
		idle = append(idle, signIn())
	}

	const workers, perWorker = 48, 32
	clients := make([][]*http.Client, workers)
	for w := range clients {
		for a := range perWorker {
			clients[w] = append(clients[w], clientAt(b, fmt.Sprintf("127.%d.%d.1", 10+w, a+1)))
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var attack statusCounts
	for w := range workers {
		untilClosed(&wg, stop, func(n int) {
			email := admin.Email
			if n%2 == 1 {
				email = "stranger" + strconv.Itoa(n) + "@example.com"
			}
			attack.add(postFrom(cp, clients[w][n%perWorker], "/api/v1/auth/login", "",
				map[string]string{"email": email, "password": "guess " + strconv.Itoa(n)}))
		})
	}
	testlab.Eventually(b, time.Minute, "strangers' wrong passwords checked", func() bool {
		attack.mu.Lock()
		defer attack.mu.Unlock()
		return attack.counts["401 invalid-credentials"] >= 100
	})

	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, signIn())
	}
	close(stop)
	wg.Wait()
	s, q := summarize(lat), summarize(idle)
	b.ReportMetric(ms(s.p50), "owner-p50-ms")
	b.ReportMetric(ms(s.p99), "owner-p99-ms")
	b.ReportMetric(ms(q.p50), "idle-p50-ms")
	b.Logf("owner's sign-ins from the known device: idle p50 %.1f ms, p99 %.1f ms; under attack: %d, p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms; strangers' answers: %v",
		ms(q.p50), ms(q.p99), len(lat), ms(s.p50), ms(s.p90), ms(s.p99), ms(s.max), attack.check(b))
}

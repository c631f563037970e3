package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// trickler is an agent request whose body comes a byte at a time, as an
// attacker holding the control plane's request slots sends it.
type trickler struct {
	conn net.Conn
	stop chan struct{}
	done chan struct{}
}

// openTrickler dials addr and writes the request line and headers of a
// POST of path with token and a body of 100,000 bytes, all but the blank
// line that ends the headers: the control plane has not seen the request
// yet.
func openTrickler(addr, path, token string) (*trickler, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	head := "POST " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + token +
		"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		c.Close()
		return nil, err
	}
	return &trickler{conn: c, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// send ends the headers and trickles the body, a byte every 200 ms, until
// close.
func (tr *trickler) send() error {
	if _, err := io.WriteString(tr.conn, "\r\n{"); err != nil {
		return err
	}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tr.stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(tr.conn, " "); err != nil {
					return
				}
			}
		}
	}()
	return nil
}

// answer reads the control plane's answer, waiting at most wait: its
// status, or 0 and the error.
func (tr *trickler) answer(wait time.Duration) (int, error) {
	tr.conn.SetReadDeadline(time.Now().Add(wait)) //nolint:errcheck
	resp, err := http.ReadResponse(bufio.NewReader(tr.conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (tr *trickler) close() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	tr.conn.Close()
}

func bogusAgentToken() string {
	b := make([]byte, 24)
	rand.Read(b) //nolint:errcheck // never fails
	return agentproto.AgentTokenPrefix + hex.EncodeToString(b)
}

// TestAgentSlotsUnderAbuse: 1,100 connections with bogus agent tokens,
// released at once in rounds and trickling their bodies, beside a real
// agent. Every bogus request is answered (401, 429 or 503) while its body
// is still coming, and the real agent's heartbeats are never refused
// meanwhile, nor is a job it is sent. Then one enrolled server opens 48
// trickling requests: it gets its share of 16 slots, the rest are refused
// at once, and the other server's calls go on.
//
// The control plane takes 64 agent requests at once rather than 1,024: a
// healthy store checks a token in well under a millisecond, so on a small
// machine 1,100 bogus requests at once are not all in their lookups
// together; 64 stand for a store that has fallen behind.
func TestAgentSlotsUnderAbuse(t *testing.T) {
	const attackers, noisy, share = 1100, 48, 16
	f := newFleet(t, Options{Args: []string{"--agent-max-in-flight", "64"}})
	_, config := f.enrollServer(t, "real")
	real := readAgentConfig(t, config)
	startAgent(t, config)
	testlab.Eventually(t, 30*time.Second, "the real agent's first heartbeat", func() bool {
		return f.server(t, real.ServerID).LastSeenAt != nil
	})

	// A second enrolled server, whose token the control plane has
	// confirmed before the attack (as any running agent's is): the
	// attack's throttle on the address must not refuse it later.
	other := f.enrollHTTP(t, f.createEnrollment(t, "noisy").Token)
	if r, err := rawAgentCall(f.ControlPlane, other.AgentToken, "/heartbeat", agentproto.HeartbeatRequest{AgentVersion: "test"}); err != nil || r.Status != http.StatusOK {
		t.Fatalf("the noisy server's first heartbeat: %v %+v", err, r)
	}

	// The real agent's own calls, as the test sees them.
	var probes, refused atomic.Int64
	var lastRefusal atomic.Value
	probe := func() {
		r, err := rawAgentCall(f.ControlPlane, real.AgentToken, "/heartbeat", agentproto.HeartbeatRequest{AgentVersion: "test"})
		probes.Add(1)
		switch {
		case err != nil:
			refused.Add(1)
			lastRefusal.Store(err.Error())
		case r.Status != http.StatusOK:
			refused.Add(1)
			lastRefusal.Store(fmt.Sprintf("%d %s", r.Status, r.Body))
		}
	}

	var statuses sync.Map // status → *atomic.Int64
	count := func(status int) {
		v, _ := statuses.LoadOrStore(status, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	type round struct {
		ready, answered sync.WaitGroup
		gate            chan struct{}
	}
	const maxRounds = 8
	rounds := make([]*round, maxRounds)
	for i := range rounds {
		rounds[i] = &round{gate: make(chan struct{})}
		rounds[i].ready.Add(attackers)
		rounds[i].answered.Add(attackers)
	}
	var ended atomic.Bool // no more rounds
	var early, late atomic.Int64
	var attack sync.WaitGroup
	for range attackers {
		attack.Go(func() {
			for _, rd := range rounds {
				tr, err := openTrickler(f.Addr, "/agent/v1/heartbeat", bogusAgentToken())
				rd.ready.Done()
				<-rd.gate
				if ended.Load() {
					if tr != nil {
						tr.close()
					}
					rd.answered.Done()
					continue
				}
				if err == nil {
					err = tr.send()
				}
				status := 0
				if err == nil {
					status, err = tr.answer(20 * time.Second)
					// Answered while the body was still coming: 100,000
					// bytes at 5 a second take hours.
					if err == nil {
						early.Add(1)
					} else {
						late.Add(1)
					}
				}
				if tr != nil {
					tr.close()
				}
				count(status)
				rd.answered.Done()
			}
		})
	}

	var jobID string
	rounds0 := time.Now()
	played := 0
	for i, rd := range rounds {
		if i >= 3 && f.job(t, jobID).Status == "succeeded" || time.Since(rounds0) > 90*time.Second {
			ended.Store(true)
			close(rd.gate)
			continue
		}
		rd.ready.Wait()
		close(rd.gate)
		if i == 0 {
			// A job for the real agent, dispatched during the attack.
			jobID = f.ping(t, real.ServerID, "under attack")
		}
		answered := make(chan struct{})
		go func() { rd.answered.Wait(); close(answered) }()
		var pw sync.WaitGroup
		for range 4 {
			pw.Go(func() {
				for {
					select {
					case <-answered:
						return
					default:
						probe()
					}
				}
			})
		}
		pw.Wait()
		played++
	}
	attack.Wait()
	var summary []string
	statuses.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("%v: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("%d rounds of %d bogus requests in %s: %s; answered while their body was open: %d, not: %d; real agent's heartbeats: %d",
		played, attackers, time.Since(rounds0).Round(time.Millisecond), strings.Join(summary, ", "), early.Load(), late.Load(), probes.Load())
	if n := refused.Load(); n > 0 {
		t.Fatalf("%d of the real agent's %d heartbeats were refused during the attack; last: %v", n, probes.Load(), lastRefusal.Load())
	}
	if late.Load() > 0 {
		t.Fatalf("%d bogus requests were not answered before their body ended", late.Load())
	}
	if played < 3 {
		t.Fatalf("only %d rounds played", played)
	}
	if j := f.waitJob(t, jobID, "succeeded", jobTimeout); j.Status != "succeeded" {
		t.Fatalf("the real agent's job: %+v", j)
	}
	for _, s := range []int{http.StatusOK, http.StatusNoContent} {
		if v, ok := statuses.Load(s); ok {
			t.Fatalf("%d bogus requests were answered %d", v.(*atomic.Int64).Load(), s)
		}
	}

	// One enrolled server trickling many bodies holds its share, no more.
	answers := make(chan int, noisy)
	var trs []*trickler
	t.Cleanup(func() {
		for _, tr := range trs {
			tr.close()
		}
	})
	for range noisy {
		tr, err := openTrickler(f.Addr, "/agent/v1/metrics", other.AgentToken)
		if err != nil {
			t.Fatal(err)
		}
		trs = append(trs, tr)
		if err := tr.send(); err != nil {
			t.Fatal(err)
		}
		go func() {
			status, _ := tr.answer(60 * time.Second)
			answers <- status
		}()
	}
	// The requests beyond its share are refused at once; those in its
	// share wait for their bodies until the body read times out.
	var got []int
	testlab.Eventually(t, 30*time.Second, fmt.Sprintf("%d of the noisy server's %d requests refused at once", noisy-share, noisy), func() bool {
		for {
			select {
			case s := <-answers:
				got = append(got, s)
			default:
				return len(got) >= noisy-share
			}
		}
	})
	for range 20 {
		probe()
	}
	if n := refused.Load(); n > 0 {
		t.Fatalf("the real agent's heartbeats were refused while another server trickled: %v", lastRefusal.Load())
	}
	testlab.Eventually(t, 60*time.Second, "every noisy request answered", func() bool {
		for {
			select {
			case s := <-answers:
				got = append(got, s)
			default:
				return len(got) == noisy
			}
		}
	})
	busy := 0
	for _, s := range got {
		if s == http.StatusServiceUnavailable {
			busy++
		}
	}
	if busy != noisy-share {
		t.Fatalf("noisy server's requests: %v; want %d refused 503 and %d admitted", got, noisy-share, share)
	}
}

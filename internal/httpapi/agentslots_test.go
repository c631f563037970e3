package httpapi

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// Slots taken in parallel never exceed the bound in all nor a server's
// share, and a burst of refusals is reported in one log line.
func TestAgentSlots(t *testing.T) {
	a := newAgentSlots(8, 3)
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
	var taken sync.WaitGroup
	var count sync.Mutex
	got, no := map[string]int{}, 0
	for i := range 64 {
		taken.Go(func() {
			server := []string{"srv_a", "srv_b", "srv_c", "srv_d"}[i%4]
			if a.acquire(server) {
				count.Lock()
				got[server]++
				count.Unlock()
				return
			}
			a.refuse(log)
			count.Lock()
			no++
			count.Unlock()
		})
	}
	taken.Wait()
	sum := 0
	for server, n := range got {
		if n > 3 {
			t.Fatalf("%s holds %d slots, more than its share of 3", server, n)
		}
		sum += n
	}
	if sum != 8 || no != 56 {
		t.Fatalf("acquired %d (%v), refused %d; want 8 and 56", sum, got, no)
	}
	mu.Lock()
	lines := strings.Count(buf.String(), "agent requests refused")
	mu.Unlock()
	if lines != 1 {
		t.Fatalf("log lines about refusals: %d, want 1:\n%s", lines, buf.String())
	}
	for server, n := range got {
		for range n {
			a.release(server)
		}
	}
	if len(a.servers) != 0 || a.inUse != 0 {
		t.Fatalf("after every slot was released: %d in use, servers %v", a.inUse, a.servers)
	}
	if p := busyProblem(); p.Status != 503 || p.GetHeaders().Get("Retry-After") == "" {
		t.Fatalf("busy problem: %+v", p)
	}
}

// One server alone, fired in parallel, gets exactly its share; the others
// still get slots.
func TestAgentSlotsPerServer(t *testing.T) {
	a := newAgentSlots(100, DefaultAgentInFlightPerServer)
	var wg sync.WaitGroup
	var got atomic.Int64
	for range 200 {
		wg.Go(func() {
			if a.acquire("srv_noisy") {
				got.Add(1)
			}
		})
	}
	wg.Wait()
	if got.Load() != DefaultAgentInFlightPerServer {
		t.Fatalf("one server took %d slots in parallel, want its share of %d", got.Load(), DefaultAgentInFlightPerServer)
	}
	if !a.acquire("srv_quiet") {
		t.Fatal("another server found no slot")
	}
}

// An address whose tokens keep failing is told to wait; others are not,
// and it may try again once its bucket refilled. An IPv6 address counts
// as its /64.
func TestAgentAuthFailures(t *testing.T) {
	clock := testlab.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newFailureBuckets(clock.Now)
	for i := range agentFailureBurst {
		if w := f.wait("192.0.2.1"); w != 0 {
			t.Fatalf("failure %d: told to wait %s", i, w)
		}
		f.fail("192.0.2.1")
	}
	if w := f.wait("192.0.2.1"); w <= 0 || w > agentFailureEvery {
		t.Fatalf("after %d failures: wait %s, want up to %s", agentFailureBurst, w, agentFailureEvery)
	}
	if w := f.wait("192.0.2.2"); w != 0 {
		t.Fatalf("another address told to wait %s", w)
	}
	clock.Advance(agentFailureEvery)
	if w := f.wait("192.0.2.1"); w != 0 {
		t.Fatalf("after %s: still told to wait %s", agentFailureEvery, w)
	}
	for range agentFailureBurst {
		f.fail("2001:db8:1:2::1")
	}
	if w := f.wait("2001:db8:1:2:ffff::9"); w == 0 {
		t.Fatal("another address of the same /64 was not told to wait")
	}
	if w := f.wait("2001:db8:1:3::1"); w != 0 {
		t.Fatalf("an address of another /64 told to wait %s", w)
	}
	if p := failuresProblem(1500 * time.Millisecond); p.Status != 429 || p.GetHeaders().Get("Retry-After") != "2" {
		t.Fatalf("failures problem: %+v", p)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Lookups of unknown tokens beyond the bound wait for a place, and get
// one as soon as another lookup ends; a waiter whose client went away
// gives up.
func TestAgentLookups(t *testing.T) {
	a := newAgentSlots(0, 0)
	ctx := t.Context()
	for range agentLookups {
		if !a.startLookup(ctx) {
			t.Fatal("a free lookup place refused")
		}
	}
	got := make(chan bool)
	go func() { got <- a.startLookup(ctx) }()
	for a.waiters.Load() != 1 {
		runtime.Gosched()
	}
	a.endLookup()
	if !<-got {
		t.Fatal("a waiting lookup did not get the place given back")
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if a.startLookup(gone) {
		t.Fatal("a lookup whose client went away got a place")
	}
}

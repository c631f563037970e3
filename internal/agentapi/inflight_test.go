package agentapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// While the store is stuck, agent requests beyond the in-flight bound are
// answered 503 with a Retry-After at once instead of piling up; those
// admitted finish when the store comes back, and waiting claims hold no
// slot.
func TestAgentRequestsBoundedInFlight(t *testing.T) {
	const bound, extra, claims = 16, 8, 20
	r := newClaimRigIn(t, true, bound)
	tokens := make([]string, bound+extra+claims)
	for i := range tokens {
		_, tokens[i] = r.enroll(t, fmt.Sprintf("inflight-%02d", i))
	}
	// Claims that wait take no slot. A claim holds one while it starts, so
	// they are sent in batches smaller than the bound: sent all at once, a
	// slow machine can have more than the bound starting together.
	for i := bound + extra; i < len(tokens); i += bound / 2 {
		batch := tokens[i:min(i+bound/2, len(tokens))]
		want := i - bound - extra + len(batch)
		r.waitingClaims(t, batch, func() bool { return r.returns.Out() == want })
	}

	// Hold the store's only write connection: a heartbeat's write waits.
	ctx := context.Background()
	w, err := r.store.DBs()["write"].Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			w.Close()
		}
	}
	t.Cleanup(release)

	type answer struct {
		status     int
		retryAfter string
		body       string
	}
	answers := make(chan answer, bound+extra)
	var wg sync.WaitGroup
	for _, tok := range tokens[:bound+extra] {
		wg.Go(func() {
			c := r.dial(t)
			c.send(t, tok, "/heartbeat", agentproto.HeartbeatRequest{AgentVersion: "test"})
			resp, body := c.read(t)
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), string(body)}
		})
	}
	var got []answer
	testlab.Eventually(t, 30*time.Second, fmt.Sprintf("%d heartbeats refused while %d wait for the store", extra, bound), func() bool {
		for {
			select {
			case a := <-answers:
				got = append(got, a)
			default:
				return len(got) >= extra
			}
		}
	})
	if len(got) != extra {
		t.Fatalf("answers while the store is stuck: %d, want %d: %+v", len(got), extra, got)
	}
	for _, a := range got {
		secs, err := strconv.Atoi(a.retryAfter)
		if a.status != http.StatusServiceUnavailable || err != nil || secs < 1 || secs > 5 || !strings.Contains(a.body, "control-plane-busy") {
			t.Fatalf("refused heartbeat: %+v, want 503 control-plane-busy with Retry-After 1-5", a)
		}
	}

	release()
	wg.Wait()
	close(answers)
	ok := 0
	for a := range answers {
		if a.status != http.StatusOK {
			t.Fatalf("admitted heartbeat: %+v, want 200", a)
		}
		ok++
	}
	if ok != bound {
		t.Fatalf("admitted heartbeats: %d, want %d", ok, bound)
	}
	// Every slot is free again.
	for _, tok := range tokens[:bound+1] {
		c := r.dial(t)
		c.send(t, tok, "/heartbeat", agentproto.HeartbeatRequest{AgentVersion: "test"})
		if resp, body := c.read(t); resp.StatusCode != http.StatusOK {
			t.Fatalf("heartbeat after the store came back: %d %s", resp.StatusCode, body)
		}
	}
}

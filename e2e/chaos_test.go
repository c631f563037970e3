package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// killAndRestart ends cp with SIGKILL, as a crash would, and starts a new
// capstan serve with the same options, address, data dir and database.
func killAndRestart(t testing.TB, cp *ControlPlane, opts Options) *ControlPlane {
	t.Helper()
	cp.Kill(t)
	opts.Args = append(append([]string(nil), opts.Args...), append([]string{"--listen", cp.Addr}, cp.StoreArgs()...)...)
	next := startControlPlane(t, opts)
	next.DataDir, next.DatabaseURL = cp.DataDir, cp.DatabaseURL
	if got, want := next.Addr, cp.Addr; got != want {
		t.Fatalf("restarted control plane listens on %s, want %s", got, want)
	}
	return next
}

// Sizes of the chaos run: bounded, since it runs in every make test.
const (
	chaosJobs   = 1000
	chaosAgents = 4
	chaosKills  = 5
)

// TestChaosControlPlaneKilled queues 1,000 jobs, each with its own
// idempotency key, from 8 clients that retry every request until it is
// answered, at four real agents, while the control plane is killed with
// SIGKILL at random moments and restarted. Then: every accepted job
// succeeds (none left running, none failed as agent_lost: a claim whose
// answer died with the process is queued again when its lease lapses), no
// agent started a job twice, and no idempotency key made two jobs (a
// retried request whose answer died with the process got the job it had
// created).
func TestChaosControlPlaneKilled(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		opts := Options{Dialect: d, Args: []string{"--restart-lease-grace=5s"}}
		f := newFleet(t, opts)
		opts.DatabaseURL = f.DatabaseURL
		var servers []string
		var agents []*AgentProcess
		for i := range chaosAgents {
			e, config := f.enrollServer(t, fmt.Sprintf("chaos-%d", i))
			agents = append(agents, startAgentWith(t, config, nil))
			servers = append(servers, e.Server.ID)
		}
		url := f.URL // the address survives the restarts

		// The clients: each request is retried with the same key until
		// the control plane answers it.
		hc := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext},
			Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		submit := func(i int) (string, error) {
			key := fmt.Sprintf("chaos-%d", i)
			body, _ := json.Marshal(map[string]any{"type": "agent.ping", "payload": map[string]any{"message": key}, "idempotency_key": key})
			deadline := time.Now().Add(3 * time.Minute)
			for attempt := 1; ; attempt++ {
				req, _ := http.NewRequest(http.MethodPost, url+"/api/v1/servers/"+servers[i%len(servers)]+"/actions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+f.Token)
				resp, err := hc.Do(req)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusAccepted, http.StatusOK:
						var a Accepted
						if err := json.Unmarshal(b, &a); err != nil || a.JobID == "" {
							return "", fmt.Errorf("%s: %d %s", key, resp.StatusCode, b)
						}
						return a.JobID, nil
					case http.StatusConflict, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusInternalServerError:
						// In flight on the dying process, or the store
						// was closing: try again.
					default:
						return "", fmt.Errorf("%s: %d %s", key, resp.StatusCode, b)
					}
				}
				if time.Now().After(deadline) {
					return "", fmt.Errorf("%s: not accepted within 3 minutes (%d attempts): %v", key, attempt, err)
				}
				// Back off before the retry, as a client of a restarting
				// service does.
				time.Sleep(time.Duration(25+rand.IntN(50)) * time.Millisecond)
			}
		}
		accepted := make([][]string, chaosJobs) // per key, every job id an answer named
		var mu sync.Mutex
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= chaosJobs {
						return
					}
					id, err := submit(i)
					if err != nil {
						t.Error(err)
						continue
					}
					mu.Lock()
					accepted[i] = append(accepted[i], id)
					mu.Unlock()
					// Half the requests are sent twice: the repeat must
					// name the same job.
					if i%2 == 0 {
						again, err := submit(i)
						if err != nil {
							t.Error(err)
							continue
						}
						mu.Lock()
						accepted[i] = append(accepted[i], again)
						mu.Unlock()
					}
				}
			})
		}
		produced := make(chan struct{})
		go func() { wg.Wait(); close(produced) }()

		// The chaos: kills at random moments while jobs flow.
		cp := f.ControlPlane
		kills := 0
		for kills < chaosKills {
			select {
			case <-produced:
			case <-time.After(time.Duration(200+rand.IntN(1300)) * time.Millisecond):
			}
			cp = killAndRestart(t, cp, opts)
			kills++
		}
		<-produced
		f.ControlPlane = cp

		// Every key made one job.
		ids := map[string]string{} // job id → key
		for i, got := range accepted {
			key := fmt.Sprintf("chaos-%d", i)
			if len(got) == 0 {
				t.Errorf("%s was never accepted", key)
				continue
			}
			for _, id := range got[1:] {
				if id != got[0] {
					t.Errorf("%s named two jobs: %s and %s", key, got[0], id)
				}
			}
			ids[got[0]] = key
		}

		// Every job ends, and is the only job of its key in the store.
		db := openStoreDB(t, cp)
		var states map[string]string
		testlab.EventuallyReport(t, 3*time.Minute, "every chaos job ended", func() (bool, string) {
			states = chaosJobStates(t, db)
			open := 0
			for _, s := range states {
				if s == "queued" || s == "running" {
					open++
				}
			}
			return open == 0, fmt.Sprintf("%d of %d jobs not ended", open, len(states))
		})
		if got, want := len(states), chaosJobs; got != want {
			t.Errorf("jobs with a chaos key in the store: %d, want %d (one per key)", got, want)
		}
		counts := map[string]int{}
		for id, s := range states {
			counts[s]++
			if _, ok := ids[id]; !ok {
				t.Errorf("job %s (%s) in the store was never named to a client", id, s)
			}
		}
		for id, n := range jobStarts(agents...) {
			if n > 1 {
				t.Errorf("job %s started %d times", id, n)
			}
		}
		t.Logf("%s: %d jobs through %d kills: %v", d, len(states), kills, counts)
		if counts["succeeded"] != len(states) {
			t.Errorf("jobs that did not succeed: %v; want every one succeeded, none lost", counts)
		}
	})
}

// openStoreDB opens a read connection to cp's database, closed when the
// test ends.
func openStoreDB(t testing.TB, cp *ControlPlane) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	if cp.Dialect == store.Postgres {
		db, err = sql.Open("pgx", cp.DatabaseURL)
	} else {
		db, err = sql.Open("sqlite", "file:"+filepath.Join(cp.DataDir, store.FileName)+"?mode=ro&_pragma=busy_timeout(10000)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// chaosJobStates returns the state of every job with a chaos key: its
// status, and for a failed one its error.
func chaosJobStates(t testing.TB, db *sql.DB) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT id, status, COALESCE(error, '') FROM jobs WHERE idempotency_key LIKE 'chaos-%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, status, errText string
		if err := rows.Scan(&id, &status, &errText); err != nil {
			t.Fatal(err)
		}
		if status == "failed" {
			status += " " + errText
		}
		out[id] = status
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLostClaimAnswerRequeued: the control plane hands a job out and the
// answer never reaches the agent (here, a claim made with the agent's
// credential whose answer nobody reads, as when the control plane dies
// between its commit and its answer). The agent never acknowledges the
// job, so when the lease lapses the job is queued again — with a warning
// event — and the real agent runs it, once: it succeeds instead of
// failing as agent_lost.
func TestLostClaimAnswerRequeued(t *testing.T) {
	t.Parallel()
	f := newFleet(t, Options{})
	e, config := f.enrollServer(t, "lost-answer")
	id := f.ping(t, e.Server.ID, "answer lost")
	if job := f.claim(t, readAgentConfig(t, config).AgentToken, 5); job == nil || job.ID != id {
		t.Fatalf("claim: got %+v, want job %s", job, id)
	}
	agent := startAgentWith(t, config, nil)
	j := f.waitJob(t, id, "succeeded", 2*time.Minute)
	warned := 0
	for _, ev := range j.Events {
		if ev.Level == "warn" && strings.Contains(ev.Message, "queued again") {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("job events %+v: want one warning that the job was queued again", j.Events)
	}
	if j.StartedAt == nil || j.StartedAt.Sub(j.CreatedAt) < 30*time.Second {
		t.Errorf("job started at %v, created at %v: want it started by the second claim, after the first one's 30 s lease", j.StartedAt, j.CreatedAt)
	}
	if n := jobStarts(agent)[id]; n != 1 {
		t.Errorf("the agent started the job %d times, want once", n)
	}
}

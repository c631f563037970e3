package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/githost"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// bodyMeter watches the request bodies a handler reads: how many are
// being read at once (from their first byte to their end), at most, and
// how many bytes were read in all.
type bodyMeter struct {
	reading, maxReading, bytes, inFlight atomic.Int64
}

type meteredBody struct {
	io.ReadCloser
	m             *bodyMeter
	started, done bool
	mu            sync.Mutex // guards started and done
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.m.bytes.Add(int64(n))
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 && !b.started {
		b.started = true
		r := b.m.reading.Add(1)
		for old := b.m.maxReading.Load(); r > old && !b.m.maxReading.CompareAndSwap(old, r); old = b.m.maxReading.Load() {
		}
	}
	if err != nil {
		b.end()
	}
	return n, err
}

func (b *meteredBody) Close() error {
	b.mu.Lock()
	b.end()
	b.mu.Unlock()
	return b.ReadCloser.Close()
}

// end counts the body as no longer being read; b.mu is held.
func (b *meteredBody) end() {
	if b.started && !b.done {
		b.done = true
		b.m.reading.Add(-1)
	}
}

func (m *bodyMeter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.inFlight.Add(1)
		defer m.inFlight.Add(-1)
		r.Body = &meteredBody{ReadCloser: r.Body, m: m}
		h.ServeHTTP(w, r)
	})
}

type answer struct {
	status int
	header http.Header
	body   string
	err    error
}

// postDelivery posts a delivery with body (of length size) and signature.
func postDelivery(hc *http.Client, url string, body io.Reader, size int64, signature string) answer {
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		return answer{err: err}
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", testlab.DeliveryID())
	req.Header.Set("X-Hub-Signature-256", signature)
	resp, err := hc.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// waitFor waits for cond, as every test of the lab does.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testlab.Eventually(t, 30*time.Second, what, cond)
}

// TestWebhookBodiesBounded: however many deliveries arrive at once, at
// most WebhookInFlight bodies are read at a time. Two deliveries that
// trickle large bodies hold both slots; a flood of bogus deliveries
// meanwhile is answered 503 webhook-busy with Retry-After, none of their
// bodies read, and nothing of them lingers once answered. A signed push
// sent while the slots are held waits for one and is handled (or, if it
// waited too long, is refused with a Retry-After and handled when sent
// again), exactly once.
func TestWebhookBodiesBounded(t *testing.T) {
	const slots = 2
	ctx := context.Background()
	st := storetest.Open(t, store.SQLite)
	host := testlab.StartGitHost(t)
	provider, err := githost.NewGitHubClient(host.APIURL, host.URL, host.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	gh := githost.NewService(st, provider, secrets.GenerateKey(), audit.NewLog(st, time.Now), "https://capstan.test", time.Now, logger)
	caller := audit.Caller{Actor: audit.Actor{Type: audit.ActorUser, ID: "usr_admin"}, SessionID: "ses_1"}
	m, err := gh.StartManifest(ctx, caller, "")
	if err != nil {
		t.Fatal(err)
	}
	code, state := host.PostManifest(t, m.PostURL, m.Manifest, "https://capstan.test"+githost.ManifestRedirectPath)
	if _, err := gh.CompleteManifest(ctx, caller, code, state); err != nil {
		t.Fatal(err)
	}
	repo := host.AddRepo("acme", "web", true, map[string]string{"main": strings.Repeat("b", 40)})
	inst := host.Install(t, "acme")
	if _, err := gh.AddInstallation(ctx, caller, inst, githost.SetupInstall); err != nil {
		t.Fatal(err)
	}
	var pushes atomic.Int64
	gh.OnPush(func(context.Context, githost.Push) (githost.PushOutcome, error) {
		pushes.Add(1)
		return githost.PushOutcome{DeploymentIDs: []string{"dep_1"}}, nil
	})
	srv := New(Deps{GitHost: gh, Logger: logger, WebhookInFlight: slots})
	meter := &bodyMeter{}
	ts := httptest.NewServer(meter.wrap(srv))
	t.Cleanup(ts.Close)
	url := ts.URL + "/api/v1/githost/webhook"
	hc := &http.Client{Timeout: time.Minute}
	t.Cleanup(hc.CloseIdleConnections)
	forged := "sha256=" + strings.Repeat("0", 64)
	goroutines := runtime.NumGoroutine()

	// Two deliveries take the slots and send the first 64 KiB of 4 MiB.
	const large, first = 4 << 20, 64 << 10
	var holders []chan answer
	var rest []func()
	for i := range slots {
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
		done := make(chan answer, 1)
		go func() { done <- postDelivery(hc, url, pr, large, forged) }()
		if _, err := pw.Write(make([]byte, first)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a large body being read", func() bool {
			return meter.reading.Load() == int64(i+1) && meter.bytes.Load() == int64((i+1)*first)
		})
		holders = append(holders, done)
		rest = append(rest, func() {
			go func() {
				pw.Write(make([]byte, large-first)) //nolint:errcheck // the answer says how it went
				pw.Close()
			}()
		})
	}

	// A flood of bogus deliveries: refused, none of their bodies read.
	const flood, floodBody = 48, 128 << 10
	read := meter.bytes.Load()
	var refused atomic.Int64
	testlab.InParallel(flood, func(int) {
		a := postDelivery(hc, url, bytes.NewReader(make([]byte, floodBody)), floodBody, forged)
		if a.err != nil || a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" ||
			a.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(a.body, "webhook-busy") {
			t.Errorf("a delivery beyond the slots: %d %v %q (%v), want 503 webhook-busy with Retry-After", a.status, a.header, a.body, a.err)
			return
		}
		refused.Add(1)
	})
	if refused.Load() != flood {
		t.Fatalf("%d of %d deliveries beyond the slots refused", refused.Load(), flood)
	}
	if got := meter.bytes.Load() - read; got != 0 {
		t.Fatalf("%d bytes of refused deliveries were read", got)
	}
	if srv.webhooks.inUse() != slots || srv.webhooks.waiters.Load() != 0 {
		t.Fatalf("after the flood: %d slots taken, %d waiting; want %d and none", srv.webhooks.inUse(), srv.webhooks.waiters.Load(), slots)
	}
	if !strings.Contains(logs.String(), "webhook deliveries refused") {
		t.Errorf("no log line about the refusals:\n%s", logs.String())
	}

	// A signed push while the slots are held: it waits, and is handled
	// once they are given back.
	push := host.PushEvent(inst, repo, "main", strings.Repeat("a", 40), strings.Repeat("b", 40))
	sig := host.Sign(push)
	real := make(chan answer, 1)
	go func() { real <- postDelivery(hc, url, bytes.NewReader(push), int64(len(push)), sig) }()
	waitFor(t, "the signed push waiting for a slot", func() bool { return srv.webhooks.waiters.Load() == 1 })
	for _, f := range rest {
		f()
	}
	for _, done := range holders {
		// 408 if it took more than the time a body may take to arrive.
		if a := <-done; a.err != nil || a.status != http.StatusUnauthorized && a.status != http.StatusRequestTimeout {
			t.Fatalf("a trickled bogus delivery: %d %q (%v), want 401 invalid-signature", a.status, a.body, a.err)
		}
	}
	a := <-real
	for range 5 {
		if a.err != nil || a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
			break
		}
		// It waited longer than its turn allows: sent again, as GitHub's
		// redelivery does.
		a = postDelivery(hc, url, bytes.NewReader(push), int64(len(push)), sig)
	}
	var res githost.WebhookResult
	if a.err != nil || a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &res) != nil || res.Result != githost.WebhookHandled {
		t.Fatalf("the signed push: %d %q (%v), want 200 handled", a.status, a.body, a.err)
	}
	if pushes.Load() != 1 {
		t.Fatalf("the push was handled %d times, want once", pushes.Load())
	}

	// At most the bound of bodies was ever read at once: the two large
	// ones and the push, nothing of the flood.
	if got := meter.maxReading.Load(); got > slots {
		t.Fatalf("%d bodies were read at once, the bound is %d", got, slots)
	}
	if got, most := meter.bytes.Load(), int64(slots*large+len(push)); got > most {
		t.Fatalf("%d bytes of bodies read, want at most %d (the two large ones and the push)", got, most)
	}
	hc.CloseIdleConnections()
	waitFor(t, "every request and its goroutines gone", func() bool {
		return meter.inFlight.Load() == 0 && srv.webhooks.inUse() == 0 && runtime.NumGoroutine() <= goroutines+8
	})
}

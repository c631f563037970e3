package e2e

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// ChannelInfo is a channel as the API shows it.
type ChannelInfo struct {
	ID         string   `json:"id"`
	Kind       string   `json:"kind"`
	Name       string   `json:"name"`
	Events     []string `json:"events"`
	Enabled    bool     `json:"enabled"`
	ConfigSet  []string `json:"config_set"`
	Secret     string   `json:"secret"`
	Deliveries []struct {
		ID           string `json:"id"`
		EventType    string `json:"event_type"`
		Status       string `json:"status"`
		Attempts     int    `json:"attempts"`
		ResponseCode int    `json:"response_code"`
		LastError    string `json:"last_error"`
	} `json:"deliveries"`
}

// verifyStandardWebhook checks a request's signature the way the
// Standard Webhooks specification tells receivers to, written here apart
// from the control plane's code: it returns how many of the signatures in
// webhook-signature secret made.
func verifyStandardWebhook(t testing.TB, r testlab.Received, secret string) int {
	t.Helper()
	id, ts, sigs := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		t.Fatalf("webhook headers missing: %v", r.Header)
	}
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret %q does not start with whsec_", secret)
	}
	key, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	if err != nil {
		t.Fatalf("secret is not base64: %v", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(r.Body)))
	want := mac.Sum(nil)
	n := 0
	for _, s := range strings.Fields(sigs) {
		v, sig, ok := strings.Cut(s, ",")
		got, err := base64.StdEncoding.DecodeString(sig)
		if ok && v == "v1" && err == nil && hmac.Equal(got, want) {
			n++
		}
	}
	return n
}

func (f *Fleet) channel(t testing.TB, id string) ChannelInfo {
	t.Helper()
	var c ChannelInfo
	expectJSON(t, f.Get(t, "/api/v1/notifications/channels/"+id, f.Token), http.StatusOK, &c)
	return c
}

func secretToken(t testing.TB) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "tok" + hex.EncodeToString(b[:])
}

// TestWebhookChannelSignedRetriedAndRotated sends events to a local HTTPS
// receiver that answers 500 twice: it sees the retries under the same
// webhook-id, each signed per Standard Webhooks (checked independently);
// the channel's detail shows the delivery; a test message goes at once; a
// rotated secret signs next to the old one during its grace period. The
// destination and the secrets appear in no answer and no log line.
func TestWebhookChannelSignedRetriedAndRotated(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Dialect) {
		var failures atomic.Int32
		failures.Store(2)
		rc := testlab.StartReceiver(t, func(int, *http.Request) int {
			if failures.Add(-1) >= 0 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		})
		f := newFleet(t, Options{Dialect: d, Env: []string{"SSL_CERT_FILE=" + rc.CAFile},
			Args: []string{"--notify-allow-destinations=127.0.0.0/8", "--notify-retry-base=200ms"}})
		token := secretToken(t)
		hook := rc.URL + "/hooks/" + token

		for _, body := range []map[string]any{
			{"kind": "webhook", "name": "bad-event", "config": map[string]any{"url": hook}, "events": []string{"server.exploded"}},
			{"kind": "webhook", "name": "no-events", "config": map[string]any{"url": hook}, "events": []string{}},
			{"kind": "webhook", "name": "plain", "config": map[string]any{"url": "http://127.0.0.1:1/x"}, "events": []string{"server.enrolled"}},
			{"kind": "pager", "name": "x", "config": map[string]any{"url": hook}, "events": []string{"server.enrolled"}},
			{"kind": "messenger", "name": "no-token", "config": map[string]any{"chat_id": "1"}, "events": []string{"server.enrolled"}},
		} {
			expectProblem(t, f.Post(t, "/api/v1/notifications/channels", f.Token, body), http.StatusUnprocessableEntity, "validation-failed")
		}

		r := f.Post(t, "/api/v1/notifications/channels", f.Token, map[string]any{"kind": "webhook", "name": "ops",
			"config": map[string]any{"url": hook}, "events": []string{"server.enrolled", "alert.opened"}})
		var ch ChannelInfo
		expectJSON(t, r, http.StatusCreated, &ch)
		if !strings.HasPrefix(ch.Secret, "whsec_") || ch.Kind != "webhook" || !ch.Enabled || len(ch.ConfigSet) != 1 || ch.ConfigSet[0] != "url" {
			t.Fatalf("created channel: %s", r.Body)
		}
		secret := ch.Secret
		expectProblem(t, f.Post(t, "/api/v1/notifications/channels", f.Token, map[string]any{"kind": "webhook", "name": "ops",
			"config": map[string]any{"url": hook}, "events": []string{"server.enrolled"}}), http.StatusConflict, "channel-name-taken")

		e := f.createEnrollment(t, "hooked-1")
		f.enrollHTTP(t, e.Token)
		testlab.Eventually(t, 60*time.Second, "the delivery after two 500s", func() bool {
			c := f.channel(t, ch.ID)
			return len(c.Deliveries) == 1 && c.Deliveries[0].Status == "delivered"
		})
		got := rc.Requests()
		if len(got) != 3 {
			t.Fatalf("receiver got %d requests, want 3 (two answered 500)", len(got))
		}
		for i, req := range got {
			if req.Header.Get("webhook-id") != got[0].Header.Get("webhook-id") {
				t.Fatalf("request %d has webhook-id %q, the first %q", i, req.Header.Get("webhook-id"), got[0].Header.Get("webhook-id"))
			}
			if n := verifyStandardWebhook(t, req, secret); n != 1 {
				t.Fatalf("request %d: %d valid signatures, want 1", i, n)
			}
		}
		var msg struct {
			Type      string `json:"type"`
			Timestamp string `json:"timestamp"`
			Data      struct {
				EventID string `json:"event_id"`
				Payload struct {
					ServerID   string `json:"server_id"`
					ServerName string `json:"server_name"`
				} `json:"payload"`
			} `json:"data"`
		}
		if err := json.Unmarshal(got[0].Body, &msg); err != nil {
			t.Fatal(err)
		}
		if msg.Type != "server.enrolled" || msg.Data.Payload.ServerID != e.Server.ID || msg.Data.Payload.ServerName != "hooked-1" ||
			msg.Timestamp == "" || msg.Data.EventID == "" {
			t.Fatalf("webhook body: %s", got[0].Body)
		}
		dl := f.channel(t, ch.ID).Deliveries[0]
		if dl.Attempts != 3 || dl.ResponseCode != 200 || dl.LastError != "" || dl.EventType != "server.enrolled" ||
			dl.ID != got[0].Header.Get("webhook-id") {
			t.Fatalf("delivery record: %+v", dl)
		}

		// A test message goes at once.
		r = f.Post(t, "/api/v1/notifications/channels/"+ch.ID+"/test", f.Token, nil)
		var res struct {
			Delivered    bool `json:"delivered"`
			ResponseCode int  `json:"response_code"`
		}
		expectJSON(t, r, http.StatusOK, &res)
		if !res.Delivered || res.ResponseCode != 200 || len(rc.Requests()) != 4 {
			t.Fatalf("test message: %s; receiver has %d requests", r.Body, len(rc.Requests()))
		}

		// Rotation: the new secret is shown once; both sign for the grace.
		r = f.Do(t, Req{Method: http.MethodPatch, Path: "/api/v1/notifications/channels/" + ch.ID, Token: f.Token,
			JSON: map[string]any{"rotate_secret": true, "grace_seconds": 3600}})
		var rot ChannelInfo
		expectJSON(t, r, http.StatusOK, &rot)
		if !strings.HasPrefix(rot.Secret, "whsec_") || rot.Secret == secret {
			t.Fatalf("rotation: %s", r.Body)
		}
		expectStatus(t, f.Post(t, "/api/v1/notifications/channels/"+ch.ID+"/test", f.Token, nil), http.StatusOK)
		last := rc.Requests()[4]
		if verifyStandardWebhook(t, last, rot.Secret) != 1 || verifyStandardWebhook(t, last, secret) != 1 {
			t.Fatalf("after rotation: signatures %q; want one by each secret", last.Header.Get("webhook-signature"))
		}

		// Neither the destination nor a secret is ever shown again or
		// logged.
		for _, path := range []string{"/api/v1/notifications/channels", "/api/v1/notifications/channels/" + ch.ID} {
			body := string(f.Get(t, path, f.Token).Body)
			for _, s := range []string{token, secret, rot.Secret, rc.URL} {
				if strings.Contains(body, s) {
					t.Fatalf("GET %s shows a destination or secret: %s", path, body)
				}
			}
		}
		for _, s := range []string{token, strings.TrimPrefix(secret, "whsec_"), strings.TrimPrefix(rot.Secret, "whsec_")} {
			if strings.Contains(f.Logs(), s) {
				t.Fatalf("the control plane logged a destination or secret")
			}
		}
		for _, action := range []string{"notification.channel.created", "notification.channel.secret_rotated"} {
			if len(auditEntries(t, f.ControlPlane, f.Token, action)) != 1 {
				t.Fatalf("audit entries of %s: want 1", action)
			}
		}
		expectStatus(t, f.Do(t, Req{Method: http.MethodDelete, Path: "/api/v1/notifications/channels/" + ch.ID, Token: f.Token}), http.StatusNoContent)
	})
}

// TestChannelDeliveriesRefuseInternalAddresses: without the operator's
// allow flag, a delivery to a loopback address is refused after DNS
// resolution ("localhost" names 127.0.0.1).
func TestChannelDeliveriesRefuseInternalAddresses(t *testing.T) {
	rc := testlab.StartReceiver(t, func(int, *http.Request) int { return http.StatusOK })
	f := newFleet(t, Options{Env: []string{"SSL_CERT_FILE=" + rc.CAFile}})
	port := rc.URL[strings.LastIndex(rc.URL, ":")+1:]
	for _, url := range []string{rc.URL + "/x", "https://localhost:" + port + "/x"} {
		r := f.Post(t, "/api/v1/notifications/channels", f.Token, map[string]any{"kind": "team_chat", "name": "chat-" + secretToken(t),
			"config": map[string]any{"url": url}, "events": []string{"deploy.failed"}})
		var ch ChannelInfo
		expectJSON(t, r, http.StatusCreated, &ch)
		r = f.Post(t, "/api/v1/notifications/channels/"+ch.ID+"/test", f.Token, nil)
		var res struct {
			Delivered bool   `json:"delivered"`
			Error     string `json:"error"`
		}
		expectJSON(t, r, http.StatusOK, &res)
		if res.Delivered || !strings.Contains(res.Error, "loopback") {
			t.Fatalf("test message to %s: %s; want refused as loopback", url, r.Body)
		}
	}
	if n := len(rc.Requests()); n != 0 {
		t.Fatalf("the receiver got %d requests", n)
	}
}

// TestWebhookDeliveredAfterKill9: the control plane is killed while a
// delivery is in flight; after it restarts, the delivery is made again
// under the same webhook-id and recorded as delivered once.
func TestWebhookDeliveredAfterKill9(t *testing.T) {
	t.Parallel()
	inFlight := make(chan struct{})
	var first atomic.Bool
	rc := testlab.StartReceiver(t, func(i int, r *http.Request) int {
		if first.CompareAndSwap(false, true) {
			close(inFlight)
			<-r.Context().Done() // never answered: the control plane dies
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	opts := Options{Env: []string{"SSL_CERT_FILE=" + rc.CAFile},
		Args: []string{"--notify-allow-destinations=127.0.0.0/8", "--notify-retry-base=200ms", "--notify-attempt-timeout=5s"}}
	f := newFleet(t, opts)
	r := f.Post(t, "/api/v1/notifications/channels", f.Token, map[string]any{"kind": "webhook", "name": "ops",
		"config": map[string]any{"url": rc.URL + "/hook"}, "events": []string{"server.enrolled"}})
	var ch ChannelInfo
	expectJSON(t, r, http.StatusCreated, &ch)
	e := f.createEnrollment(t, "crash-1")
	f.enrollHTTP(t, e.Token)
	select {
	case <-inFlight:
	case <-time.After(60 * time.Second):
		t.Fatal("no delivery attempt within a minute")
	}
	f.Kill(t)
	next := restartControlPlane(t, f.ControlPlane, opts)
	g := &Fleet{ControlPlane: next, Opts: opts, Admin: f.Admin, Token: signInUser(t, next, f.Admin).AccessToken}
	testlab.Eventually(t, 2*time.Minute, "the delivery after the restart", func() bool {
		c := g.channel(t, ch.ID)
		return len(c.Deliveries) == 1 && c.Deliveries[0].Status == "delivered"
	})
	got := rc.Requests()
	if len(got) != 2 || got[0].Header.Get("webhook-id") != got[1].Header.Get("webhook-id") {
		t.Fatalf("receiver got %d requests (webhook-ids %q); want the same delivery twice", len(got), []string{
			got[0].Header.Get("webhook-id"), got[len(got)-1].Header.Get("webhook-id")})
	}
	if dl := g.channel(t, ch.ID).Deliveries[0]; dl.Attempts != 2 || dl.ResponseCode != 200 {
		t.Fatalf("delivery: %+v", dl)
	}
}

// TestChatChannelsSendTheirFormats sends test messages to a team chat
// incoming webhook and to a messenger bot API at a base URL of the test's
// (as a self-hosted Bot API server would be).
func TestChatChannelsSendTheirFormats(t *testing.T) {
	rc := testlab.StartReceiver(t, func(int, *http.Request) int { return http.StatusOK })
	f := newFleet(t, Options{Env: []string{"SSL_CERT_FILE=" + rc.CAFile}, Args: []string{"--notify-allow-destinations=127.0.0.1/32"}})
	botToken := "123456:" + secretToken(t)
	for _, body := range []map[string]any{
		{"kind": "team_chat", "name": "chat", "config": map[string]any{"url": rc.URL + "/services/T0/B0/" + secretToken(t)},
			"events": []string{"alert.opened"}},
		{"kind": "messenger", "name": "bot", "config": map[string]any{"bot_token": botToken, "chat_id": "-1001", "api_base_url": rc.URL},
			"events": []string{"alert.opened"}},
	} {
		var ch ChannelInfo
		expectJSON(t, f.Post(t, "/api/v1/notifications/channels", f.Token, body), http.StatusCreated, &ch)
		if ch.Secret != "" {
			t.Fatalf("a %s channel got a signing secret", ch.Kind)
		}
		expectStatus(t, f.Post(t, "/api/v1/notifications/channels/"+ch.ID+"/test", f.Token, nil), http.StatusOK)
	}
	got := rc.Requests()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(got))
	}
	var chat struct {
		Text   string           `json:"text"`
		Blocks []map[string]any `json:"blocks"`
	}
	if err := json.Unmarshal(got[0].Body, &chat); err != nil || !strings.Contains(chat.Text, "test message") || len(chat.Blocks) == 0 {
		t.Fatalf("team chat message: %s (%v)", got[0].Body, err)
	}
	var msg struct {
		ChatID string `json:"chat_id"`
		Text   string `json:"text"`
	}
	if err := json.Unmarshal(got[1].Body, &msg); err != nil || got[1].Path != "/bot"+botToken+"/sendMessage" || msg.ChatID != "-1001" || msg.Text == "" {
		t.Fatalf("messenger call %s: %s (%v)", got[1].Path, got[1].Body, err)
	}
	if strings.Contains(f.Logs(), botToken) {
		t.Fatal("the control plane logged the bot token")
	}
}

// BenchmarkEventToWebhook measures how long an event takes from its
// change (a server enrolling, published in the same transaction) to a
// webhook receiver on loopback: it reports the p50 and p99 of the time
// between the event's timestamp and the request's arrival.
func BenchmarkEventToWebhook(b *testing.B) {
	var lat []time.Duration
	rc := testlab.StartReceiver(b, func(_ int, r *http.Request) int { return http.StatusOK })
	f := newFleet(b, Options{Env: []string{"SSL_CERT_FILE=" + rc.CAFile}, Args: []string{"--notify-allow-destinations=127.0.0.0/8"}})
	r := f.Post(b, "/api/v1/notifications/channels", f.Token, map[string]any{"kind": "webhook", "name": "bench",
		"config": map[string]any{"url": rc.URL + "/hook"}, "events": []string{"server.enrolled"}})
	expectStatus(b, r, http.StatusCreated)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := f.createEnrollment(b, "lat-"+strconv.Itoa(i))
		f.enrollHTTP(b, e.Token)
	}
	testlab.Eventually(b, time.Minute, "every webhook", func() bool { return len(rc.Requests()) >= b.N })
	b.StopTimer()
	for _, req := range rc.Requests() {
		var msg struct {
			Timestamp time.Time `json:"timestamp"`
		}
		if err := json.Unmarshal(req.Body, &msg); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, req.At.Sub(msg.Timestamp))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

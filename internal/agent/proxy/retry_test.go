package proxy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent/proxy"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// refusingAdmin speaks Caddy's admin /load on loopback: it refuses the
// first refusals loads with message, the way Caddy answers, and accepts
// the rest. Caddy's own transient refusal depends on a race inside it that
// a test cannot bring about at will, so its answer is replayed here.
func refusingAdmin(t *testing.T, refusals int32, message string) (adminURL string, loads *atomic.Int32) {
	t.Helper()
	loads = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/load" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if loads.Add(1) <= refusals {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"` + message + `"}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, loads
}

func applyThrough(adminURL string) error {
	p := proxy.New(proxy.Settings{AdminURL: adminURL, HTTPPort: 1080, HTTPSPort: 1443, ListenHost: "127.0.0.1"}, nil)
	return p.Apply(context.Background(), agentproto.ProxyConfig{}, nil)
}

// Caddy 2.6 refuses a load while it still writes the certificate metadata
// of the previous one; such a refusal is tried again.
func TestTransientRefusalIsRetried(t *testing.T) {
	admin, loads := refusingAdmin(t, 2, "loading new config: loading tls app module: provision tls: loading certificates: decoding certificate metadata: unexpected end of JSON input")
	if err := applyThrough(admin); err != nil {
		t.Fatalf("apply after two transient refusals: %v", err)
	}
	if n := loads.Load(); n != 3 {
		t.Fatalf("loads = %d, want 3 (two refused, one accepted)", n)
	}
}

// A transient refusal that persists is reported after a bounded number of
// tries; a refusal about the configuration itself is reported at once.
func TestRefusalIsReported(t *testing.T) {
	admin, loads := refusingAdmin(t, 1000, "decoding certificate metadata: unexpected end of JSON input")
	if err := applyThrough(admin); !proxy.IsLoadError(err) {
		t.Fatalf("apply = %v, want Caddy's refusal", err)
	}
	if n := loads.Load(); n != 4 {
		t.Fatalf("loads = %d, want 4 (one and three retries)", n)
	}
	admin, loads = refusingAdmin(t, 1, "loading new config: http app module: start: listening on :80: bind: permission denied")
	if err := applyThrough(admin); !proxy.IsLoadError(err) {
		t.Fatalf("apply = %v, want Caddy's refusal", err)
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("loads = %d, want 1", n)
	}
}

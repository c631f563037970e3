package agent

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

func TestBackoffFullJitterBounds(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 30 * time.Second}
	wantCeil := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30, 30, 30}
	for n, c := range wantCeil {
		ceil := c * time.Second
		if got := b.Ceiling(); got != ceil {
			t.Fatalf("attempt %d: Ceiling() = %s, want %s", n, got, ceil)
		}
		d := b.Next()
		if d < 0 || d > ceil {
			t.Fatalf("attempt %d: Next() = %s, want within [0, %s]", n, d, ceil)
		}
	}
	if got, want := b.Attempts(), len(wantCeil); got != want {
		t.Fatalf("Attempts() = %d, want %d", got, want)
	}
	// Many attempts never overflow the cap.
	for range 200 {
		if d := b.Next(); d < 0 || d > 30*time.Second {
			t.Fatalf("Next() = %s after many failures, want within [0, 30s]", d)
		}
	}
	b.Reset()
	if got, want := b.Ceiling(), time.Second; got != want {
		t.Fatalf("Ceiling() after Reset = %s, want %s", got, want)
	}
}

func TestBackoffJitterSpreads(t *testing.T) {
	// Full jitter: delays spread over the whole [0, ceiling] range rather
	// than clustering at the ceiling.
	var lo, hi int
	const n = 2000
	for range n {
		b := Backoff{Min: time.Second, Max: 30 * time.Second}
		b.attempt = 3 // ceiling 8 s
		d := b.Next()
		if d < 0 || d > 8*time.Second {
			t.Fatalf("Next() = %s, want within [0, 8s]", d)
		}
		if d < 2*time.Second {
			lo++
		}
		if d > 6*time.Second {
			hi++
		}
	}
	// Each quarter expects ~500 of 2000; allow a wide margin.
	if lo < 300 || hi < 300 {
		t.Fatalf("delays not spread: %d below 2s, %d above 6s of %d", lo, hi, n)
	}
}

func TestBackoffDefaults(t *testing.T) {
	var b Backoff
	if got, want := b.Ceiling(), DefaultBackoffMin; got != want {
		t.Fatalf("zero Backoff Ceiling() = %s, want %s", got, want)
	}
	for range 10 {
		b.Next()
	}
	if got, want := b.Ceiling(), DefaultBackoffMax; got != want {
		t.Fatalf("zero Backoff Ceiling() after 10 failures = %s, want %s", got, want)
	}
}

func TestRetryDelayHonoursRetryAfter(t *testing.T) {
	b := Backoff{Min: time.Millisecond, Max: 5 * time.Second}
	err := &APIError{Status: 503, RetryAfter: 3 * time.Second}
	if got, want := RetryDelay(&b, err), 3*time.Second; got != want {
		t.Fatalf("RetryDelay = %s, want %s", got, want)
	}
	// Longer than the backoff's maximum: still honoured, up to
	// MaxRetryAfter.
	err.RetryAfter = time.Minute
	if got, want := RetryDelay(&b, err), time.Minute; got != want {
		t.Fatalf("RetryDelay with Retry-After beyond the backoff's maximum = %s, want %s", got, want)
	}
	err.RetryAfter = time.Hour
	if got, want := RetryDelay(&b, err), MaxRetryAfter; got != want {
		t.Fatalf("RetryDelay with very long Retry-After = %s, want cap %s", got, want)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{"7", 7 * time.Second},
		{"99999999", MaxRetryAfter},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := retryAfter(tc.v, now); got != tc.want {
			t.Errorf("retryAfter(%q) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

func TestRecentJobs(t *testing.T) {
	r := newRecentJobs(3, 1000)
	if seen, _ := r.begin("a"); seen {
		t.Fatal("first begin(a): seen")
	}
	if seen, res := r.begin("a"); !seen || res != nil {
		t.Fatalf("second begin(a) = %v, %v; want seen, no result", seen, res)
	}
	r.finish("a", &agentproto.CompleteRequest{Status: agentproto.StatusSucceeded})
	if seen, res := r.begin("a"); !seen || res == nil || res.Status != agentproto.StatusSucceeded {
		t.Fatalf("begin(a) after finish = %v, %v; want seen with result", seen, res)
	}
	r.begin("b")
	r.begin("c")
	r.begin("d") // evicts the least recently used: a was touched last before b, c
	if got, want := r.len(), 3; got != want {
		t.Fatalf("len = %d, want %d", got, want)
	}
	if seen, _ := r.begin("a"); seen {
		t.Fatal("a still remembered after eviction")
	}
	if got, want := r.resultBytes, 0; got != want {
		t.Fatalf("resultBytes after evicting a = %d, want %d", got, want)
	}
}

func TestRecentJobsResultBudget(t *testing.T) {
	r := newRecentJobs(100, 300)
	big := func() *agentproto.CompleteRequest {
		return &agentproto.CompleteRequest{Status: agentproto.StatusSucceeded, Output: json.RawMessage(`"` + strings.Repeat("x", 100) + `"`)}
	}
	for _, id := range []string{"a", "b", "c"} {
		r.begin(id)
		r.finish(id, big())
	}
	if r.resultBytes > 300 {
		t.Fatalf("resultBytes = %d, want ≤ 300", r.resultBytes)
	}
	if seen, res := r.begin("a"); !seen || res != nil {
		t.Fatalf("oldest result: seen=%v res=%v; want id kept, result dropped", seen, res)
	}
	if seen, res := r.begin("c"); !seen || res == nil {
		t.Fatalf("newest result: seen=%v res=%v; want kept", seen, res)
	}
	r.begin("huge")
	r.finish("huge", &agentproto.CompleteRequest{Output: json.RawMessage(strings.Repeat("1", 1000))})
	if seen, res := r.begin("huge"); !seen || res != nil {
		t.Fatalf("oversized result: seen=%v res=%v; want id kept, result not", seen, res)
	}
}

func TestConfigSaveLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etc", "capstan")
	path := filepath.Join(dir, "agent.json")
	if _, err := LoadConfig(path); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("LoadConfig(missing) = %v, want ErrNotEnrolled", err)
	}
	want := Config{APIURL: "https://cp.example.com", ServerID: "srv_1", ServerName: "web", AgentToken: "agt_x", HeartbeatSeconds: 30, MetricsSeconds: 60}
	if err := SaveConfig(path, want); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, path: 0o600} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode(); got != mode {
			t.Errorf("mode of %s = %v, want %v", p, got, mode)
		}
	}
	got, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("LoadConfig = %+v, want %+v", got, want)
	}
	// Overwrite: atomic, no temporary files left behind.
	want.ServerName = "web-2"
	if err := SaveConfig(path, want); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if got, want := len(entries), 1; got != want {
		t.Fatalf("%d files in config dir, want %d: %v", got, want, entries)
	}
	if err := os.WriteFile(path, []byte(`{"api_url":"https://x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("LoadConfig(no token) = %v, want ErrNotEnrolled", err)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{APIURL: "http://127.0.0.1:8080", ServerID: "srv_1", AgentToken: "agt_x"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", ok, err)
	}
	for name, mut := range map[string]func(*Config){
		"bad url":   func(c *Config) { c.APIURL = "ftp://x" },
		"no server": func(c *Config) { c.ServerID = "" },
		"bad token": func(c *Config) { c.AgentToken = "ept_x" },
		"negative":  func(c *Config) { c.HeartbeatSeconds = -1 },
	} {
		c := ok
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate(%+v) = nil, want error", name, c)
		}
	}
}

func TestParseAPIURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":          "http://127.0.0.1:8080",
		"https://cp.example.com/":        "https://cp.example.com",
		"https://cp.example.com/capstan": "https://cp.example.com/capstan",
	} {
		if got, err := ParseAPIURL(in); err != nil || got != want {
			t.Errorf("ParseAPIURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "cp.example.com", "/relative", "ftp://cp.example.com", "https://", "https://u:p@cp.example.com", "https://cp.example.com/?a=1", "https://cp.example.com/#x", "http://[::1"} {
		if got, err := ParseAPIURL(in); err == nil {
			t.Errorf("ParseAPIURL(%q) = %q, want error", in, got)
		}
	}
}

func TestParseOSRelease(t *testing.T) {
	kv := parseOSRelease(strings.NewReader(`# comment
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
ID=debian
QUOTED='single'
ESC="a\"b\\c"
`))
	for k, want := range map[string]string{"ID": "debian", "VERSION_ID": "12", "QUOTED": "single", "ESC": `a"b\c`, "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"} {
		if got := kv[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func TestParseMemTotal(t *testing.T) {
	in := "MemFree:         1000 kB\nMemTotal:       16318008 kB\n"
	if got, want := parseMemTotal(strings.NewReader(in)), uint64(16318008*1024); got != want {
		t.Fatalf("parseMemTotal = %d, want %d", got, want)
	}
	if got := parseMemTotal(strings.NewReader("nothing")); got != 0 {
		t.Fatalf("parseMemTotal(no MemTotal) = %d, want 0", got)
	}
}

func TestSplitAddrs(t *testing.T) {
	var addrs []net.Addr
	for _, s := range []string{"127.0.0.1/8", "::1/128", "10.0.0.5/24", "192.168.1.2/24", "172.17.0.1/16", "100.64.1.1/10",
		"203.0.113.7/24", "203.0.113.7/24", "2001:db8::1/64", "fe80::1/64", "169.254.1.1/16", "fd00::2/64"} {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, &net.IPNet{IP: ip, Mask: n.Mask})
	}
	pub, priv := splitAddrs(addrs)
	if want := []string{"2001:db8::1", "203.0.113.7"}; !slices.Equal(pub, want) {
		t.Errorf("public = %v, want %v", pub, want)
	}
	if want := []string{"10.0.0.5", "100.64.1.1", "172.17.0.1", "192.168.1.2", "fd00::2"}; !slices.Equal(priv, want) {
		t.Errorf("private = %v, want %v", priv, want)
	}
}

func TestCollectFacts(t *testing.T) {
	f := CollectFacts("1.2.3")
	if f.Hostname == "" || f.Arch == "" || f.CPUCount < 1 {
		t.Fatalf("CollectFacts = %+v: hostname, arch and cpu_count must be set", f)
	}
	if got, want := f.AgentVersion, "1.2.3"; got != want {
		t.Fatalf("agent_version = %q, want %q", got, want)
	}
	if _, err := os.Stat(meminfoPath); err == nil && f.MemoryBytes == 0 {
		t.Fatal("memory_bytes = 0 although /proc/meminfo exists")
	}
	if f.PublicAddresses == nil || f.PrivateAddresses == nil {
		t.Fatal("address lists must be non-nil (encoded as [])")
	}
}

func TestRedactor(t *testing.T) {
	r := newRedactor(map[string]string{"pw": `s3cr<et>"x`, "short": "abc"})
	if got, want := r.string(`login with s3cr<et>"x and abc`), `login with [REDACTED] and abc`; got != want {
		t.Fatalf("string = %q, want %q", got, want)
	}
	b, _ := json.Marshal(map[string]string{"v": `pre s3cr<et>"x post`})
	if got := string(r.jsonBytes(b)); strings.Contains(got, "s3cr") || !json.Valid([]byte(got)) {
		t.Fatalf("jsonBytes = %s: secret left or invalid JSON", got)
	}
	var nilR *redactor
	if got, want := nilR.string("x"), "x"; got != want {
		t.Fatalf("nil redactor string = %q, want %q", got, want)
	}
}

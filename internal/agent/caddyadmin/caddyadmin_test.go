package caddyadmin_test

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent/caddyadmin"
)

func TestParse(t *testing.T) {
	for addr, want := range map[string]caddyadmin.Endpoint{
		caddyadmin.Default: {Address: caddyadmin.Default, Listen: caddyadmin.Default,
			Socket: "/run/capstan-proxy/admin.sock", BaseURL: "http://caddy"},
		"unix//tmp/a.sock":      {Address: "unix//tmp/a.sock", Listen: "unix//tmp/a.sock", Socket: "/tmp/a.sock", BaseURL: "http://caddy"},
		"http://127.0.0.1:2019": {Address: "http://127.0.0.1:2019", Listen: "127.0.0.1:2019", BaseURL: "http://127.0.0.1:2019"},
		"http://[::1]:2999/":    {Address: "http://[::1]:2999/", Listen: "[::1]:2999", BaseURL: "http://[::1]:2999"},
	} {
		got, err := caddyadmin.Parse(addr)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", addr, got, err, want)
		}
	}
	for _, addr := range []string{
		"", "127.0.0.1:2019", "http://127.0.0.1", "https://127.0.0.1:2019", "http://127.0.0.1:2019/api", "http://u@127.0.0.1:2019",
		"unix/", "unix/relative.sock", "unix//run/../x.sock", "unix//run/a b.sock", "unix//run/{env.X}.sock",
		"unix//run/a.sock|", "unix//run/a.sock|0440", "unix//run/a.sock|rw", "unix//run/a.sock|1777",
	} {
		if e, err := caddyadmin.Parse(addr); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", addr, e)
		}
	}
}

// TestClientOverSocket: a client of a socket endpoint reaches whatever
// listens on the socket, whatever the URL's host.
func TestClientOverSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Method+" "+r.URL.Path) //nolint:errcheck
	})}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })

	e, err := caddyadmin.Parse("unix/" + sock + "|0660")
	if err != nil {
		t.Fatal(err)
	}
	for _, keepAlive := range []bool{false, true} {
		resp, err := e.Client(keepAlive, 0).Get(e.BaseURL + "/config/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "GET /config/" {
			t.Errorf("keep-alive %v: %q", keepAlive, b)
		}
	}
}

package proxy_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestPublishRealCaddy: a published port is a listener of Caddy's that
// reaches its app's upstream, follows a switch of that upstream, goes
// away with the port, and a port another program holds fails the apply
// with Caddy's bind error, the previous configuration still serving.
func TestPublishRealCaddy(t *testing.T) {
	c := testlab.StartCaddy(t)
	p := newProxy(c, "")
	ctx := context.Background()
	one, two := upstream(t, "one"), upstream(t, "two")
	port := testlab.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := agentproto.ProxyConfig{Sites: []agentproto.ProxySite{}, Ports: []agentproto.ProxyPort{{AppID: "app_1", Bind: "127.0.0.1", Port: port}}}
	if err := p.Apply(ctx, cfg, map[string]string{"app_1": one}); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	waitFor(t, hc, "http://"+addr+"/", 200, "one "+addr)
	if err := p.Apply(ctx, cfg, map[string]string{"app_1": two}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, hc, "http://"+addr+"/", 200, "two "+addr)

	// Another program holds a port: the apply fails, saying so.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldPort := held.Addr().(*net.TCPAddr).Port
	bad := cfg
	bad.Ports = append([]agentproto.ProxyPort{}, cfg.Ports...)
	bad.Ports = append(bad.Ports, agentproto.ProxyPort{AppID: "app_2", Bind: "127.0.0.1", Port: heldPort})
	err = p.Apply(ctx, bad, map[string]string{"app_1": two, "app_2": one})
	if err == nil {
		t.Fatal("a port another program holds was applied")
	}
	if want := fmt.Sprintf("published port 127.0.0.1:%d of app app_2 is in use", heldPort); !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "address already in use") {
		t.Errorf("error %q, want it to say %q with Caddy's bind error", err, want)
	}
	// The previous configuration still serves.
	waitFor(t, hc, "http://"+addr+"/", 200, "two "+addr)

	// Without the port, nothing listens there.
	if err := p.Apply(ctx, agentproto.ProxyConfig{Sites: []agentproto.ProxySite{}}, nil); err != nil {
		t.Fatal(err)
	}
	testlab.Eventually(t, 30*time.Second, addr+" closed", func() bool {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
}

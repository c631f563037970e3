package apps_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func TestPublishProblems(t *testing.T) {
	for _, p := range []apps.Publish{
		{HostPort: 8081}, {HostPort: 1, Bind: "0.0.0.0"}, {HostPort: 65535, Bind: "::1"}, {HostPort: 9000, Bind: "::"},
		{HostPort: 9000, Bind: "10.0.0.5"},
	} {
		if pr := apps.PublishProblems(p); len(pr) != 0 {
			t.Errorf("%+v: %v", p, pr)
		}
	}
	for _, c := range []struct {
		p     apps.Publish
		field string
	}{
		{apps.Publish{}, "host_port"},
		{apps.Publish{HostPort: -1}, "host_port"},
		{apps.Publish{HostPort: 65536}, "host_port"},
		{apps.Publish{HostPort: 80}, "host_port"},
		{apps.Publish{HostPort: 443}, "host_port"},
		{apps.Publish{HostPort: 2019}, "host_port"},
		{apps.Publish{HostPort: 8081, Bind: "localhost"}, "bind"},
		{apps.Publish{HostPort: 8081, Bind: "127.0.0.1:8081"}, "bind"},
		{apps.Publish{HostPort: 8081, Bind: "[::1]"}, "bind"},
		{apps.Publish{HostPort: 8081, Bind: "fe80::1%eth0"}, "bind"},
		{apps.Publish{HostPort: 8081, Bind: " 127.0.0.1"}, "bind"},
	} {
		if _, ok := apps.PublishProblems(c.p)[c.field]; !ok {
			t.Errorf("%+v: no problem with %s", c.p, c.field)
		}
	}
}

// createPublishing creates (without deploying) an application that
// publishes p.
func (r *rig) createPublishing(name string, p *apps.Publish) (apps.ApplicationDetail, error) {
	return r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: name, ServerID: r.serverID,
		Source: apps.Source{Type: apps.SourceImage, Image: "ghcr.io/acme/" + name + ":v1"}, ContainerPort: 8080, Publish: p})
}

func TestPublishStoredAndInProxyState(t *testing.T) {
	r := newRig(t)
	_, err := r.createPublishing("bad", &apps.Publish{HostPort: 443, Bind: "example.com"})
	wantInvalid(t, err, "publish.host_port", "publish.bind")

	d, err := r.createPublishing("web", &apps.Publish{HostPort: 8081})
	if err != nil {
		t.Fatal(err)
	}
	if d.Publish == nil || *d.Publish != (apps.Publish{HostPort: 8081, Bind: "127.0.0.1"}) {
		t.Fatalf("publish %+v, want 127.0.0.1:8081", d.Publish)
	}
	if len(d.Addresses) != 1 || d.Addresses[0] != (apps.Address{Kind: apps.AddressPort, Address: "127.0.0.1:8081", URL: "http://127.0.0.1:8081/"}) {
		t.Errorf("addresses %+v", d.Addresses)
	}
	before, err := r.apps.ProxyConfig(r.ctx, r.serverID)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Ports) != 1 || before.Ports[0] != (agentproto.ProxyPort{AppID: d.ID, Bind: "127.0.0.1", Port: 8081}) {
		t.Fatalf("proxy state ports %+v", before.Ports)
	}

	// A deployment keeps the port: it is the application's.
	r.deploy(d.ID, "")
	j := r.claim(agentproto.JobAppDeploy)
	if p := payloadOf(t, j); len(p.Proxy.Ports) != 1 || p.Proxy.Ports[0].Port != 8081 {
		t.Errorf("deploy job's proxy state has ports %+v", p.Proxy.Ports)
	}
	r.succeed(j, "sha256:"+fmt.Sprintf("%064d", 1))

	// Another address: the state's revision moves, and the live release
	// takes it at once.
	d, err = r.apps.Update(r.ctx, r.admin, d.ID, apps.Patch{Publish: &apps.Publish{HostPort: 9090, Bind: "::"}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Addresses[0].Address != "[::]:9090" || d.Addresses[0].URL != "http://[::1]:9090/" {
		t.Errorf("addresses %+v", d.Addresses)
	}
	after, err := r.apps.ProxyConfig(r.ctx, r.serverID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision <= before.Revision || len(after.Ports) != 1 || after.Ports[0].Address() != "[::]:9090" {
		t.Errorf("after the change: revision %d (before %d), ports %+v", after.Revision, before.Revision, after.Ports)
	}
	pj := r.claim(agentproto.JobProxyApply)
	var pp agentproto.ProxyApplyPayload
	if err := jsonUnmarshal(pj.Payload, &pp); err != nil {
		t.Fatal(err)
	}
	if pp.Proxy.Revision != after.Revision || len(pp.Proxy.Ports) != 1 {
		t.Errorf("proxy.apply carries %+v, want revision %d", pp.Proxy, after.Revision)
	}

	// Unpublished: out of the state.
	d, err = r.apps.Update(r.ctx, r.admin, d.ID, apps.Patch{Publish: &apps.Publish{}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Publish != nil || len(d.Addresses) != 0 {
		t.Errorf("after removing it: publish %+v, addresses %+v", d.Publish, d.Addresses)
	}
	if cfg, _ := r.apps.ProxyConfig(r.ctx, r.serverID); len(cfg.Ports) != 0 || cfg.Revision <= after.Revision {
		t.Errorf("after removing it: %+v", cfg)
	}
}

// TestPublishPortTakenOnce: two applications of one server never publish
// one port, whatever the bind; of creates and updates racing for one,
// exactly one wins and the others get 409 port-published.
func TestPublishPortTakenOnce(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, st *store.Store) {
		r := newRigOn(t, st)
		if _, err := r.createPublishing("one", &apps.Publish{HostPort: 8081}); err != nil {
			t.Fatal(err)
		}
		_, err := r.createPublishing("two", &apps.Publish{HostPort: 8081, Bind: "0.0.0.0"})
		wantConflict(t, err, "port-published")
		two, err := r.createPublishing("two", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.apps.Update(r.ctx, r.admin, two.ID, apps.Patch{Publish: &apps.Publish{HostPort: 8081}})
		wantConflict(t, err, "port-published")
		if a := r.app(two.ID); a.Publish != nil {
			t.Fatalf("the refused update stored %+v", a.Publish)
		}

		// Racing creates and updates for port 9000.
		const n = 6
		var ids []string
		for i := range n / 2 {
			a, err := r.createPublishing(fmt.Sprintf("idle-%d", i), nil)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, a.ID)
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					_, errs[i] = r.createPublishing(fmt.Sprintf("racer-%d", i), &apps.Publish{HostPort: 9000})
				} else {
					_, errs[i] = r.apps.Update(r.ctx, r.admin, ids[i/2], apps.Patch{Publish: &apps.Publish{HostPort: 9000}})
				}
			}()
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
				continue
			}
			wantConflict(t, err, "port-published")
			_ = i
		}
		if won != 1 {
			t.Fatalf("%d of %d racing for one port won: %v", won, n, errs)
		}
		cfg, err := r.apps.ProxyConfig(r.ctx, r.serverID)
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.Ports) != 2 {
			t.Errorf("proxy state ports %+v, want 8081 and 9000", cfg.Ports)
		}

		// Another server may publish the same port.
		other := r.enroll("web-2", agentproto.Facts{Hostname: "web-2"})
		if _, err := r.apps.Create(r.ctx, r.admin, apps.NewApp{Name: "one", ServerID: other,
			Source: apps.Source{Type: apps.SourceImage, Image: "ghcr.io/acme/one:v1"}, ContainerPort: 8080,
			Publish: &apps.Publish{HostPort: 8081}}); err != nil {
			t.Errorf("port 8081 on another server: %v", err)
		}
	})
}

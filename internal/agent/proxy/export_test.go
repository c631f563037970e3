package proxy

// InjectHostname makes p's next loads also match host on the HTTPS
// server, bypassing CheckHostname, so that tests can have Caddy refuse a
// configuration; "" stops it.
func InjectHostname(p *Proxy, host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if host == "" {
		p.beforeLoad = nil
		return
	}
	p.beforeLoad = func(c *caddyConfig) {
		s := c.Apps.HTTP.Servers[httpsServer]
		s.Routes = append([]route{hostRoute(host, static(200, "injected\n"))}, s.Routes...)
	}
}

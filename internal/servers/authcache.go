package servers

import (
	"sync"
	"time"
)

// AgentAuthTTL bounds how long an agent token, once checked against the
// store, is accepted from memory. Every agent request is authenticated, a
// few per agent every 10 seconds; the cache saves most of those lookups.
//
// Revocation is immediate: Revoke and Delete drop the server's entries
// (after the store has committed) and bump a generation that keeps lookups
// already in flight from caching what they read before. With several
// control planes on one PostgreSQL database (Deps.Bus), nothing is
// cached: another control plane's revocation must refuse the next call.
const AgentAuthTTL = 30 * time.Second

// maxAuthEntries bounds the cache's size; beyond it, tokens are checked
// against the store every time until expired entries are swept.
const maxAuthEntries = 100_000

// An entry outlives its TTL until the cache is full: it is no longer
// accepted, but it still says that the token was a valid one of its
// server (known), which lets the API check it within that server's share
// of the agent request slots rather than among the tokens nobody knows.

// authCache maps agent token hashes to their server.
type authCache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex // guards gen and entries
	gen     uint64
	entries map[string]authEntry
}

type authEntry struct {
	srv     Server
	checked time.Time // when the store last confirmed the token
}

func newAuthCache(now func() time.Time, ttl time.Duration) *authCache {
	return &authCache{ttl: ttl, now: now, entries: map[string]authEntry{}}
}

// get returns the server of a token hash confirmed within the TTL.
func (c *authCache) get(hash string) (Server, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	if !ok {
		return Server{}, false
	}
	if age := c.now().Sub(e.checked); age >= c.ttl || age < 0 {
		return Server{}, false
	}
	return e.srv, true
}

// known returns the server of a token hash confirmed at any time and not
// invalidated since, fresh or not.
func (c *authCache) known(hash string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	return e.srv.ID, ok
}

// generation is read before a store lookup and passed to put.
func (c *authCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put caches what a lookup that started at generation gen read at
// checked, unless a revocation happened since.
func (c *authCache) put(hash string, srv Server, gen uint64, checked time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if len(c.entries) >= maxAuthEntries {
		now := c.now()
		for h, e := range c.entries {
			if now.Sub(e.checked) >= c.ttl {
				delete(c.entries, h)
			}
		}
		if len(c.entries) >= maxAuthEntries {
			return
		}
	}
	c.entries[hash] = authEntry{srv: srv, checked: checked}
}

// forget drops the entry of a token hash the store no longer takes.
func (c *authCache) forget(hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, hash)
}

// invalidate forgets every token of a server and makes lookups in flight
// not cache their result.
func (c *authCache) invalidate(serverID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for h, e := range c.entries {
		if e.srv.ID == serverID {
			delete(c.entries, h)
		}
	}
}

// clear forgets every token and makes lookups in flight not cache their
// result.
func (c *authCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.entries)
}

package store

import (
	"sync"
	"time"
)

// maxRevisionEntries bounds the revision cache: one entry per server that
// heartbeats, so a fleet far larger than any this store serves still fits.
const maxRevisionEntries = 200_000

// revisionCache keeps each server's DatabasesRevision between changes of
// its instances. Every agent's heartbeat carries the revision, and an
// instance changes a few times a day, so nearly every heartbeat is
// answered from memory. Every change of an instance through this store
// clears it (databasesChanged), and on PostgreSQL, so does a change made
// by another control plane, whose message Listen hears; there it is used
// only while Listen hears them, and its entries are dropped after
// maxAge.
type revisionCache struct {
	mu     sync.Mutex // guards the fields below
	gen    uint64     // bumped by every invalidate
	revs   map[string]string
	filled time.Time     // when the first of revs was put
	maxAge time.Duration // 0: no bound
}

// get returns the cached revision of serverID, and the generation to
// hand put after a lookup when there is none.
func (c *revisionCache) get(serverID string) (string, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.maxAge > 0 && c.revs != nil && time.Since(c.filled) > c.maxAge {
		c.invalidateLocked()
	}
	rev, ok := c.revs[serverID]
	return rev, c.gen, ok
}

// put caches what a lookup that began at generation gen read, unless an
// instance changed since: the lookup may have read the state before it.
func (c *revisionCache) put(serverID, rev string, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.revs == nil || len(c.revs) >= maxRevisionEntries {
		c.revs = map[string]string{}
		c.filled = time.Now()
	}
	c.revs[serverID] = rev
}

// invalidate forgets every revision.
func (c *revisionCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.invalidateLocked()
}

func (c *revisionCache) invalidateLocked() {
	c.gen++
	c.revs = nil
}

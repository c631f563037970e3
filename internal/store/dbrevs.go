package store

import "sync"

// maxRevisionEntries bounds the revision cache: one entry per server that
// heartbeats, so a fleet far larger than any this store serves still fits.
const maxRevisionEntries = 200_000

// revisionCache keeps each server's DatabasesRevision between changes of
// its instances. Every agent's heartbeat carries the revision, and an
// instance changes a few times a day, so nearly every heartbeat is
// answered from memory. It serves SQLite only: an SQLite store belongs to
// one control plane, which makes every change through the functions that
// call invalidate; a PostgreSQL store may be changed by another control
// plane at any time, so its revisions are always read.
type revisionCache struct {
	mu   sync.Mutex // guards gen and revs
	gen  uint64     // bumped by every invalidate
	revs map[string]string
}

// get returns the cached revision of serverID, and the generation to
// hand put after a lookup when there is none.
func (c *revisionCache) get(serverID string) (string, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
	}
	c.revs[serverID] = rev
}

// invalidate forgets every revision. It is called after a change of any
// instance was committed (or failed: forgetting is always safe).
func (c *revisionCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.revs = nil
}

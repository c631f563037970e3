package container

import (
	"testing"
	"time"
)

// FuzzParseCursor parses arbitrary container log cursors (they come back
// from the control plane, which takes them from the API's callers). It
// never panics, and a cursor it accepts encodes back to one that parses to
// the same position.
func FuzzParseCursor(f *testing.F) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)
	f.Add(Cursor{Stdout: Position{At: t0, Count: 2}, Stderr: Position{At: t0.Add(-time.Millisecond), Count: 1}}.String())
	for _, s := range []string{
		"", ";", "stdout=;stderr=", "stdout=2026-11-22T10:00:00Z~0;stderr=2026-11-22T10:00:00Z~0",
		"stdout=2026-11-22T10:00:00+14:00~1;stderr=0001-01-01T00:00:00Z~1073741824",
		"stdout=2026-11-22T10:00:00Z~-1;stderr=2026-11-22T10:00:00Z~1", "stderr=2026-11-22T10:00:00Z~1;stdout=2026-11-22T10:00:00Z~1",
		"stdout=9999-12-31T23:59:59.999999999Z~99;stderr=2026-02-30T10:00:00Z~1", "stdout=x~1;stderr=y~2;stdin=z~3",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			return
		}
		again, err := ParseCursor(c.String())
		if err != nil {
			t.Fatalf("%q parses, but its encoding %q does not: %v", s, c.String(), err)
		}
		if !again.Stdout.At.Equal(c.Stdout.At) || !again.Stderr.At.Equal(c.Stderr.At) || again.Stdout.Count != c.Stdout.Count || again.Stderr.Count != c.Stderr.Count {
			t.Fatalf("%q: %+v encodes to %q, which parses to %+v", s, c, c.String(), again)
		}
		_ = c.since()
	})
}

package agentproto

import (
	"strconv"
	"strings"
)

// CompareVersions orders two engine versions number by number: it
// returns -1 when a is older than b, 0 when they are the same version
// and +1 when a is newer ("7.0" < "7.2" < "7.10", "15" < "15.4" < "16").
// A number one of them leaves out counts as 0 ("7.0" and "7.0.0" are the
// same). ok is false when either is not dot-separated decimal numbers.
func CompareVersions(a, b string) (cmp int, ok bool) {
	x, okA := versionNumbers(a)
	y, okB := versionNumbers(b)
	if !okA || !okB {
		return 0, false
	}
	for i := range max(len(x), len(y)) {
		var m, n int
		if i < len(x) {
			m = x[i]
		}
		if i < len(y) {
			n = y[i]
		}
		switch {
		case m < n:
			return -1, true
		case m > n:
			return 1, true
		}
	}
	return 0, true
}

func versionNumbers(v string) ([]int, bool) {
	if v == "" {
		return nil, false
	}
	parts := strings.Split(v, ".")
	out := make([]int, len(parts))
	for i, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" {
			return nil, false
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

// LoadVersion picks, among the versions have of one engine, the one a
// backup or dump made by version src is loaded into: src itself when
// have holds it, else the newest of have above src. A Redis/Valkey
// snapshot (RDB), a PostgreSQL dump (plain or custom format) and a
// MySQL/MariaDB logical dump load into the same or a newer version of
// their engine, and are not promised to load into an older one, so an
// older version is never picked: ok is false when have holds none at or
// above src, or when src is not a version CompareVersions reads.
// Versions of have that it cannot read are passed over. The control
// plane picks an engine image with it, and an agent a server installed
// on its host, so that both follow one rule.
func LoadVersion(src string, have []string) (string, bool) {
	best, found := "", false
	for _, v := range have {
		c, ok := CompareVersions(v, src)
		if !ok || c < 0 {
			continue
		}
		if c == 0 {
			return v, true
		}
		if newer, _ := CompareVersions(v, best); !found || newer > 0 {
			best, found = v, true
		}
	}
	return best, found
}

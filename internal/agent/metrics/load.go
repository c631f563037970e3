package metrics

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// parseLoadavg reads the 1, 5 and 15 minute load averages of /proc/loadavg.
func parseLoadavg(r io.Reader) (l1, l5, l15 float64, err error) {
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return 0, 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, 0, 0, fmt.Errorf("/proc/loadavg: %q has fewer than 3 fields", strings.TrimSpace(string(b)))
	}
	var v [3]float64
	for i := range v {
		if v[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return 0, 0, 0, fmt.Errorf("/proc/loadavg: %w", err)
		}
	}
	return v[0], v[1], v[2], nil
}

// parseUptime reads the seconds since boot from /proc/uptime.
func parseUptime(r io.Reader) (uint64, error) {
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/uptime is empty")
	}
	s, err := strconv.ParseFloat(f[0], 64)
	if err != nil || s < 0 {
		return 0, fmt.Errorf("/proc/uptime: bad value %q", f[0])
	}
	return uint64(s), nil
}

package metrics

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// cpuTimes are the aggregate CPU counters of /proc/stat, in clock ticks
// since boot.
type cpuTimes struct {
	total uint64 // user+nice+system+idle+iowait+irq+softirq+steal
	idle  uint64 // idle+iowait
}

// parseCPUTimes reads the aggregate "cpu" line of /proc/stat (proc(5)).
// guest and guest_nice are left out: the kernel already counts them in user
// and nice.
func parseCPUTimes(r io.Reader) (cpuTimes, error) {
	// The cpu line comes first; later lines (intr) can be longer than a
	// Scanner's default limit, so only the first lines are read.
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if rest, ok := strings.CutPrefix(line, "cpu "); ok {
			f := strings.Fields(rest)
			if len(f) < 4 {
				return cpuTimes{}, fmt.Errorf("/proc/stat: short cpu line %q", strings.TrimSpace(line))
			}
			var v [8]uint64 // user nice system idle iowait irq softirq steal
			for i := 0; i < len(f) && i < len(v); i++ {
				n, err := strconv.ParseUint(f[i], 10, 64)
				if err != nil {
					return cpuTimes{}, fmt.Errorf("/proc/stat: cpu field %d: %w", i+1, err)
				}
				v[i] = n
			}
			var t cpuTimes
			for _, n := range v {
				t.total += n
			}
			t.idle = v[3] + v[4]
			return t, nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return cpuTimes{}, errors.New("/proc/stat: no cpu line")
			}
			return cpuTimes{}, err
		}
	}
}

// cpuPercent is the share of non-idle time between two readings, 0 to 100.
// Counters that went backwards (iowait may) count as no change.
func cpuPercent(prev, cur cpuTimes) float64 {
	if cur.total <= prev.total {
		return 0
	}
	total := cur.total - prev.total
	var idle uint64
	if cur.idle > prev.idle {
		idle = min(cur.idle-prev.idle, total)
	}
	return clampPercent(100 * float64(total-idle) / float64(total))
}

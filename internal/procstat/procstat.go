// Package procstat reads a Linux process's own account of its memory and
// threads from /proc/PID/status.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Status returns the numeric fields of /proc/PID/status (pid "self" is
// this process): each line's first number, keyed by the field's name.
// Sizes (VmRSS, VmHWM, RssAnon, RssFile, RssShmem, …) are in KiB, as the
// kernel writes them.
func Status(pid string) (map[string]int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			out[k] = n
		}
	}
	if _, ok := out["VmRSS"]; !ok {
		return nil, fmt.Errorf("/proc/%s/status has no VmRSS (a kernel thread or a zombie?)", pid)
	}
	return out, nil
}

package main

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// cgroupMemoryMax is where a cgroup v2 process reads its memory limit.
var cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// applyMemoryLimit sets the Go runtime's soft memory limit from
// --memory-limit and returns it as text for the log ("none" when there
// is none). GOMEMLIMIT in the environment takes precedence: the runtime
// has applied it already.
func applyMemoryLimit(flag string) (string, error) {
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		return "GOMEMLIMIT=" + env, nil
	}
	var limit int64
	switch v := strings.TrimSpace(flag); v {
	case "", "off":
		return "none", nil
	case "auto":
		b, err := os.ReadFile(cgroupMemoryMax)
		if err != nil {
			return "none", nil
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= math.MaxInt64/2 { // "max": no limit
			return "none", nil
		}
		limit = n / 10 * 8
	default:
		n, err := parseSize(v)
		if err != nil {
			return "", fmt.Errorf("--memory-limit: %w (or auto, off)", err)
		}
		if n < 32<<20 {
			return "", fmt.Errorf("--memory-limit must be at least 32MiB")
		}
		limit = n
	}
	debug.SetMemoryLimit(limit)
	return fmt.Sprintf("%dMiB", limit>>20), nil
}

// serveGODEBUG is the runtime setting the control plane runs with:
// goroutines start with the smallest stack and grow as they need. The
// runtime's adaptive initial size would give every new goroutine the
// average stack of the deep request handlers, also the one per open
// request that only waits for its client to hang up, and the control
// plane holds a request open per agent (the claim long poll): at 10,000
// agents that is over 100 MB of stacks nobody uses.
const serveGODEBUG = "adaptivestackstart=0"

// execWithRuntimeSettings starts the control plane again, in the same
// process (exec), with serveGODEBUG added to GODEBUG: the runtime reads
// this setting only at start. GODEBUG that already names the setting is
// left as it is. When that fails, it runs as it is.
func execWithRuntimeSettings() error {
	cur, set := os.LookupEnv("GODEBUG")
	key, _, _ := strings.Cut(serveGODEBUG, "=")
	if set && strings.Contains(","+cur, ","+key+"=") {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	v := serveGODEBUG
	if cur != "" {
		v = cur + "," + v
	}
	env := make([]string, 0, len(os.Environ())+1)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GODEBUG=") {
			env = append(env, e)
		}
	}
	err = syscall.Exec(exe, os.Args, append(env, "GODEBUG="+v))
	fmt.Fprintf(os.Stderr, "capstan: warning: could not start again with GODEBUG=%s, running without: %v\n", v, err)
	return nil
}

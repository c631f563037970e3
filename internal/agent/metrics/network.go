package metrics

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// netCounters are the byte counters of one interface.
type netCounters struct {
	rx, tx uint64
}

// virtualInterfacePrefixes name interfaces whose traffic is not the host's
// own: loopback, container and VM plumbing (veth pairs, bridges), and
// traffic-shaping mirrors. Their packets also cross a physical interface,
// so counting them would count traffic twice.
var virtualInterfacePrefixes = []string{"veth", "docker", "br-", "virbr", "vnet", "cni", "flannel", "cali", "ifb", "kube-"}

// virtualInterface reports whether an interface is left out of the host's
// network rates.
func virtualInterface(name string) bool {
	if name == "lo" {
		return true
	}
	for _, p := range virtualInterfacePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// parseNetDev reads the receive and transmit byte counters of the
// interfaces in /proc/net/dev that virtualInterface does not exclude.
func parseNetDev(r io.Reader) (map[string]netCounters, error) {
	out := map[string]netCounters{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue // the two header lines
		}
		name = strings.TrimSpace(name)
		if virtualInterface(name) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			return nil, fmt.Errorf("/proc/net/dev: short line for %s", name)
		}
		rx, err1 := strconv.ParseUint(f[0], 10, 64)
		tx, err2 := strconv.ParseUint(f[8], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("/proc/net/dev: bad counters for %s", name)
		}
		out[name] = netCounters{rx: rx, tx: tx}
	}
	return out, sc.Err()
}

// netRates are the summed receive and transmit rates in bytes per second
// between two readings elapsed apart. An interface missing from prev (it
// just appeared) or whose counters went backwards (reset) adds nothing.
func netRates(prev, cur map[string]netCounters, elapsed time.Duration) (rx, tx float64) {
	if elapsed <= 0 || prev == nil {
		return 0, 0
	}
	var drx, dtx uint64
	for name, c := range cur {
		p, ok := prev[name]
		if !ok {
			continue
		}
		if c.rx >= p.rx {
			drx += c.rx - p.rx
		}
		if c.tx >= p.tx {
			dtx += c.tx - p.tx
		}
	}
	s := elapsed.Seconds()
	return float64(drx) / s, float64(dtx) / s
}
